"""Plots as self-contained SVG: a line (the loss curve) and a histogram (scores, credit).

Styled with presentation attributes only (no CSS classes, no <style>), so the same markup works
inline in the trace viewer (whose Content-Security-Policy allows no inline style sheet) and as a
``data:image/svg+xml`` image in Dagster's Markdown metadata. Every number is formatted here and
every label escaped, so the markup is safe to embed.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Collection, Sequence
from html import escape

from stash_pipeline.core.curves import downsample

WIDTH, HEIGHT, MARGIN = 560, 220, 44
LINE, BAR, AREA, EDGE, INK, MUTED = "#2f5fbf", "#6d8fd6", "#fafbfc", "#d9dce1", "#1d1f23", "#626874"
FONT = 'font-family="sans-serif" font-size="11"'


def _text(x: float, y: float, text: str, *, anchor: str = "start", colour: str = MUTED,
          bold: bool = False) -> str:
    weight = ' font-weight="600"' if bold else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{colour}" {FONT}'
            f'{weight}>{escape(text)}</text>')


def _frame(title: str, x_label: str, y_low: float, y_high: float, body: str) -> str:
    inner_h = HEIGHT - 2 * MARGIN
    ticks = "".join(_text(MARGIN - 6, MARGIN + inner_h * (1 - f) + 4,
                          f"{y_low + (y_high - y_low) * f:.3g}", anchor="end")
                    for f in (0, 0.5, 1))
    return (f'<svg class="plot" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} '
            f'{HEIGHT}" width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">'
            f'<title>{escape(title)}</title>'
            f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>'
            f'<rect x="{MARGIN}" y="{MARGIN}" width="{WIDTH - 2 * MARGIN}" height="{inner_h}" '
            f'fill="{AREA}" stroke="{EDGE}"/>{ticks}{body}'
            + _text(WIDTH / 2, HEIGHT - 10, x_label, anchor="middle")
            + _text(WIDTH / 2, MARGIN - 14, title, anchor="middle", colour=INK, bold=True)
            + "</svg>")


def _finite(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


def line_plot(values: Sequence[float], *, title: str, x_label: str) -> str | None:
    """A polyline of ``values`` (downsampled), or None when there is nothing to draw."""
    points = downsample(values)
    if not points:
        return None
    low, high = min(points), max(points)
    if high - low < 1e-12:
        low, high = low - 0.5, high + 0.5
    inner_w, inner_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN
    step = inner_w / max(len(points) - 1, 1)
    coords = " ".join(f"{MARGIN + i * step:.1f},{MARGIN + inner_h * (high - v) / (high - low):.1f}"
                      for i, v in enumerate(points))
    body = (f'<polyline class="plot-line" points="{coords}" fill="none" stroke="{LINE}" '
            f'stroke-width="1.5"/>'
            + _text(MARGIN, HEIGHT - MARGIN + 14, "1")
            + _text(WIDTH - MARGIN, HEIGHT - MARGIN + 14, str(len(_finite(values))),
                    anchor="end"))
    return _frame(title, x_label, low, high, body)


def histogram(values: Sequence[float], *, title: str, x_label: str, bins: int = 20) -> str | None:
    """Bars counting ``values`` in ``bins`` equal bins, or None when there are none."""
    finite = _finite(values)
    if not finite:
        return None
    low, high = min(finite), max(finite)
    width = (high - low) / bins or 1.0
    counts = [0] * bins
    for v in finite:
        counts[min(int((v - low) / width), bins - 1)] += 1
    top = max(counts)
    inner_w, inner_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN
    bar = inner_w / bins
    bars = "".join(
        f'<rect class="plot-bar" x="{MARGIN + i * bar + 1:.1f}" '
        f'y="{MARGIN + inner_h * (1 - c / top):.1f}" width="{bar - 2:.1f}" '
        f'height="{inner_h * c / top:.1f}" fill="{BAR}">'
        f'<title>{low + i * width:.3g} to {low + (i + 1) * width:.3g}: {c}</title></rect>'
        for i, c in enumerate(counts) if c)
    edges = (_text(MARGIN, HEIGHT - MARGIN + 14, f"{low:.3g}")
             + _text(WIDTH - MARGIN, HEIGHT - MARGIN + 14, f"{high:.3g}", anchor="end"))
    return _frame(title, f"{x_label} ({len(finite)} values)", 0, top, bars + edges)


def data_uri(svg: str) -> str:
    """The SVG as a ``data:`` URL, for a Markdown image."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


INTERVAL_ROW, INTERVAL_LABEL, GOOD, WEAK, REFERENCE = 22, 200, "#1a9641", "#c0392b", "#9aa1ad"


def interval_plot(rows: Sequence[tuple[str, float | None, float | None, float | None, int]], *,
                  title: str, low: float = 0.0, high: float = 1.0,
                  reference: float | None = 0.5, reference_label: str = "chance",
                  unjudged: Collection[int] = ()) -> str | None:
    """One line per ``(label, value, interval low, interval high, n)``: the value as a dot on
    its 95% interval, against a reference line (chance). Rows without a value show their n only;
    rows whose index is in ``unjudged`` (too few groups to judge) are drawn neutral whatever
    their interval. None when there are no rows."""
    if not rows:
        return None
    inner_w = WIDTH - INTERVAL_LABEL - MARGIN
    height = 2 * MARGIN + INTERVAL_ROW * len(rows)

    def x(value: float) -> float:
        return INTERVAL_LABEL + inner_w * (min(max(value, low), high) - low) / (high - low)

    parts = [f'<rect x="{INTERVAL_LABEL}" y="{MARGIN}" width="{inner_w}" '
             f'height="{INTERVAL_ROW * len(rows)}" fill="{AREA}" stroke="{EDGE}"/>']
    if reference is not None:
        parts.append(f'<line x1="{x(reference):.1f}" y1="{MARGIN}" x2="{x(reference):.1f}" '
                     f'y2="{height - MARGIN}" stroke="{REFERENCE}" stroke-dasharray="4 3"/>'
                     + _text(x(reference), height - MARGIN + 14, f"{reference:g} {reference_label}",
                             anchor="middle"))
    for tick in (low, high):
        parts.append(_text(x(tick), MARGIN - 4, f"{tick:g}", anchor="middle"))
    for i, (label, value, lo, hi, n) in enumerate(rows):
        y = MARGIN + INTERVAL_ROW * (i + 0.5)
        parts.append(_text(INTERVAL_LABEL - 8, y + 4, _shorten(label), anchor="end",
                           colour=INK))
        if value is None or lo is None or hi is None:
            parts.append(_text(INTERVAL_LABEL + 6, y + 4, f"n {n}: not enough to estimate"))
            continue
        colour = (LINE if i in unjudged else GOOD if reference is None or lo > reference
                  else WEAK if hi < reference else LINE)
        tip = f"{label}: {value:.3f} (95% {lo:.3f} to {hi:.3f}), n {n}"
        parts.append(
            f'<g class="plot-interval"><title>{escape(tip)}</title>'
            f'<line x1="{x(lo):.1f}" y1="{y:.1f}" x2="{x(hi):.1f}" y2="{y:.1f}" '
            f'stroke="{colour}" stroke-width="2"/>'
            f'<circle cx="{x(value):.1f}" cy="{y:.1f}" r="4" fill="{colour}"/></g>'
            + _text(WIDTH - MARGIN + 10, y + 4, f"n {n}"))
    return _svg(title, height, "".join(parts))


def reliability_plot(bins: Sequence[tuple[float, float, float, float, float, int]], *,
                     title: str, x_label: str) -> str | None:
    """A reliability curve: per ``(bin low, bin high, success rate, interval low, interval high,
    n)`` the rate at the bin's middle on its 95% interval, and the diagonal a probability would
    follow, drawn dashed for reference. None without bins."""
    if not bins:
        return None
    inner_w, inner_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN

    def point(x_value: float, y_value: float) -> tuple[float, float]:
        return MARGIN + inner_w * x_value, MARGIN + inner_h * (1 - y_value)

    (x0, y0), (x1, y1) = point(0, 0), point(1, 1)
    parts = [f'<line x1="{x0:.1f}" y1="{y0:.1f}" x2="{x1:.1f}" y2="{y1:.1f}" '
             f'stroke="{REFERENCE}" stroke-dasharray="4 3"/>']
    centres = []
    for low, high, rate, lo, hi, n in bins:
        cx, cy = point((low + high) / 2, rate)
        _, top = point(0, hi)
        _, bottom = point(0, lo)
        centres.append(f"{cx:.1f},{cy:.1f}")
        tip = (f"score {low:.1f} to {high:.1f}: {rate:.0%} succeeded "
               f"(95% {lo:.0%} to {hi:.0%}), n {n}")
        parts.append(
            f'<g class="plot-bin"><title>{escape(tip)}</title>'
            f'<line x1="{cx:.1f}" y1="{top:.1f}" x2="{cx:.1f}" y2="{bottom:.1f}" stroke="{BAR}" '
            f'stroke-width="2"/><circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{LINE}"/></g>'
            + _text(cx, max(top - 5, MARGIN + 10), f"n {n}", anchor="middle"))
    parts.append(f'<polyline points="{" ".join(centres)}" fill="none" stroke="{LINE}" '
                 f'stroke-width="1"/>')
    parts.append(_text(MARGIN, HEIGHT - MARGIN + 14, "0")
                 + _text(WIDTH - MARGIN, HEIGHT - MARGIN + 14, "1", anchor="end"))
    return _frame(title, x_label, 0, 1, "".join(parts))


def _shorten(label: str, limit: int = 30) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def _svg(title: str, height: int, body: str) -> str:
    return (f'<svg class="plot" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} '
            f'{height}" width="{WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
            f'<title>{escape(title)}</title>'
            f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>{body}'
            + _text(WIDTH / 2, MARGIN - 22, title, anchor="middle", colour=INK, bold=True)
            + "</svg>")
