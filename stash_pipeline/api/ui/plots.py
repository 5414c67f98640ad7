"""Plots as inline SVG, drawn on the server: a loss curve, a histogram, no JavaScript library.

Every number is formatted by this module and every label escaped, so the markup is safe to embed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from stash_pipeline.core.curves import downsample

WIDTH, HEIGHT, MARGIN = 560, 220, 44


def _frame(title: str, x_label: str, y_low: float, y_high: float, body: str) -> str:
    inner_h = HEIGHT - 2 * MARGIN
    ticks = "".join(
        f'<text x="{MARGIN - 6}" y="{MARGIN + inner_h * (1 - f) + 4:.1f}" '
        f'text-anchor="end" class="tick">{y_low + (y_high - y_low) * f:.3g}</text>'
        for f in (0, 0.5, 1))
    return (f'<svg class="plot" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} '
            f'{HEIGHT}" width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">'
            f'<title>{escape(title)}</title>'
            f'<rect x="{MARGIN}" y="{MARGIN}" width="{WIDTH - 2 * MARGIN}" height="{inner_h}" '
            f'class="plot-area"/>{ticks}{body}'
            f'<text x="{WIDTH / 2}" y="{HEIGHT - 10}" text-anchor="middle" class="axis">'
            f'{escape(x_label)}</text>'
            f'<text x="{WIDTH / 2}" y="{MARGIN - 14}" text-anchor="middle" class="plot-title">'
            f'{escape(title)}</text></svg>')


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
    body = (f'<polyline points="{coords}" class="plot-line"/>'
            f'<text x="{MARGIN}" y="{HEIGHT - MARGIN + 14}" class="tick">1</text>'
            f'<text x="{WIDTH - MARGIN}" y="{HEIGHT - MARGIN + 14}" text-anchor="end" '
            f'class="tick">{len(values)}</text>')
    return _frame(title, x_label, low, high, body)


def histogram(values: Sequence[float], *, title: str, x_label: str, bins: int = 20) -> str | None:
    """Bars counting ``values`` in ``bins`` equal bins, or None when there are none."""
    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
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
        f'<rect x="{MARGIN + i * bar + 1:.1f}" y="{MARGIN + inner_h * (1 - c / top):.1f}" '
        f'width="{bar - 2:.1f}" height="{inner_h * c / top:.1f}" class="plot-bar">'
        f'<title>{low + i * width:.3g} to {low + (i + 1) * width:.3g}: {c}</title></rect>'
        for i, c in enumerate(counts) if c)
    edges = (f'<text x="{MARGIN}" y="{HEIGHT - MARGIN + 14}" class="tick">{low:.3g}</text>'
             f'<text x="{WIDTH - MARGIN}" y="{HEIGHT - MARGIN + 14}" text-anchor="end" '
             f'class="tick">{high:.3g}</text>')
    return _frame(title, f"{x_label} ({len(finite)} values)", 0, top, bars + edges)


def credit_class(credit: float | None) -> str:
    """The CSS class of a credit in [-1, 1]: ``credit-m10`` .. ``credit-0`` .. ``credit-p10``."""
    if credit is None or not math.isfinite(credit):
        return "credit-none"
    step = round(max(-1.0, min(1.0, credit)) * 10)
    return "credit-0" if step == 0 else f"credit-{'p' if step > 0 else 'm'}{abs(step)}"
