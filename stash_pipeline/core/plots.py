"""Plots as self-contained SVG: a line (the loss curve) and a histogram (scores, credit).

Styled with presentation attributes only (no CSS classes, no <style>), so the same markup works
inline in the trace viewer (whose Content-Security-Policy allows no inline style sheet) and as a
``data:image/svg+xml`` image in Dagster's Markdown metadata. Every number is formatted here and
every label escaped, so the markup is safe to embed.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
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
