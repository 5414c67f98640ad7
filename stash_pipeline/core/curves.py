"""A long series shortened for a plot: the loss curve the worker records, the pages that draw it."""

from __future__ import annotations

import math
from collections.abc import Sequence

LOSS_CURVE_POINTS = 200  # metrics.loss_curve: at most this many points


def downsample(values: Sequence[float], points: int = LOSS_CURVE_POINTS) -> list[float]:
    """At most ``points`` finite values: means of consecutive runs of equal length (the last one
    shorter); a series that is short enough comes back as it is."""
    finite = [float(v) for v in values
              if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    if len(finite) <= points:
        return finite
    size = math.ceil(len(finite) / points)
    return [sum(finite[i:i + size]) / len(finite[i:i + size])
            for i in range(0, len(finite), size)]
