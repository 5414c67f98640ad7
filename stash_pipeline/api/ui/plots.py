"""The viewer's pictures: the plots (``core.plots``, shared with Dagster's metadata) and the
heatmap's colour buckets."""

from __future__ import annotations

import math

from stash_pipeline.core.plots import histogram, line_plot

__all__ = ["credit_class", "histogram", "line_plot"]


def credit_class(credit: float | None) -> str:
    """The CSS class of a credit in [-1, 1]: ``credit-m10`` .. ``credit-0`` .. ``credit-p10``."""
    if credit is None or not math.isfinite(credit):
        return "credit-none"
    step = round(max(-1.0, min(1.0, credit)) * 10)
    return "credit-0" if step == 0 else f"credit-{'p' if step > 0 else 'm'}{abs(step)}"
