"""Figures with their 95% intervals, for the release gate and the trust report (docs/trust.md).

Pure and small-sample safe: every interval stays inside the figure's range and never collapses to
a point at its edge (3 held-out pairs all right is not "1.0, certain").

- A proportion (pairwise accuracy, a success rate): Wilson's score interval.
- An AUC (the Mann-Whitney probability that a succeeded trace outscores a failed one, ties half):
  Hanley and McNeil's (1982) variance written as a function of the AUC, with both group sizes
  replaced by their mean as Newcombe (2006) does, and inverted like Wilson's interval: the
  interval holds every AUC ``a`` with ``(AUC - a)^2 <= z^2 V(a)``.
- A Spearman correlation: the Pearson correlation of average ranks, its interval Fisher's z
  transform with Bonett and Wright's (2000) variance for rank correlations,
  ``(1 + r^2 / 2) / (n - 3)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from stash_pipeline.core.training_settings import GATE_Z

Z95 = GATE_Z  # two-sided 95%


def wilson_interval(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion of ``correct`` out of ``n`` (0..1 for none)."""
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def auc(positives: Sequence[float], negatives: Sequence[float]) -> float | None:
    """The probability that a positive's score exceeds a negative's, ties counted half (the
    Mann-Whitney U over m x n); None without both groups."""
    m, n = len(positives), len(negatives)
    if not m or not n:
        return None
    ranks = average_ranks([*positives, *negatives])
    return (math.fsum(ranks[:m]) - m * (m + 1) / 2) / (m * n)


def hanley_mcneil_se(area: float, m: int, n: int) -> float:
    """Hanley and McNeil's (1982) standard error of an AUC of ``m`` positives and ``n``
    negatives."""
    q1, q2 = area / (2 - area), 2 * area * area / (1 + area)
    variance = (area * (1 - area) + (m - 1) * (q1 - area * area)
                + (n - 1) * (q2 - area * area)) / (m * n)
    return math.sqrt(max(variance, 0.0))


def _auc_variance(area: float, m: int, n: int) -> float:
    """Hanley-McNeil's variance at ``area`` with both sizes at their mean (Newcombe 2006)."""
    half = (m + n) / 2
    return area * (1 - area) / (m * n) * (
        1 + (half - 1) * ((1 - area) / (2 - area) + area / (1 + area)))


def auc_interval(area: float, m: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The score-type interval of an AUC of ``m`` positives and ``n`` negatives: where
    ``(area - a)^2 = z^2 V(a)``, found by bisection on each side of ``area``."""
    if not m or not n:
        return 0.0, 1.0

    def outside(a: float) -> bool:
        return (area - a) ** 2 > z * z * _auc_variance(a, m, n)

    def edge(inside: float, out: float) -> float:
        for _ in range(60):
            middle = (inside + out) / 2
            inside, out = (inside, middle) if outside(middle) else (middle, out)
        return inside

    low = 0.0 if not outside(0.0) else edge(area, 0.0)
    high = 1.0 if not outside(1.0) else edge(area, 1.0)
    return low, high


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation (Pearson's of average ranks); None under 3 points or when
    either side is constant."""
    if len(xs) != len(ys):
        raise ValueError(f"{len(xs)} values against {len(ys)}")
    if len(xs) < 3:
        return None
    rx, ry = average_ranks(xs), average_ranks(ys)
    mx, my = math.fsum(rx) / len(rx), math.fsum(ry) / len(ry)
    sxy = math.fsum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = math.fsum((a - mx) ** 2 for a in rx)
    syy = math.fsum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def spearman_interval(rho: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Fisher's z interval of a Spearman correlation of ``n`` points, with Bonett and Wright's
    variance; (-1, 1) under 4 points, where it says nothing."""
    if n < 4:
        return -1.0, 1.0
    clipped = max(-0.999999, min(0.999999, rho))
    centre = math.atanh(clipped)
    half = z * math.sqrt((1 + rho * rho / 2) / (n - 3))
    return math.tanh(centre - half), math.tanh(centre + half)


@dataclass(frozen=True)
class ReliabilityBin:
    """One bin of a reliability curve: traces whose score lies in [low, high) (the last bin
    includes 1), how many succeeded, and that success rate's Wilson interval."""

    low: float
    high: float
    n: int
    successes: int
    mean_score: float

    @property
    def rate(self) -> float:
        return self.successes / self.n

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.successes, self.n)


def reliability_bins(scores: Sequence[float], succeeded: Sequence[bool],
                     bins: int = 10) -> list[ReliabilityBin]:
    """The success rate by score bin, ``bins`` equal bins over [0, 1]; empty bins are left out."""
    if len(scores) != len(succeeded):
        raise ValueError(f"{len(scores)} scores against {len(succeeded)} outcomes")
    members: list[list[tuple[float, bool]]] = [[] for _ in range(bins)]
    for score, success in zip(scores, succeeded):
        if not 0.0 <= score <= 1.0:
            raise ValueError(f"a calibrated score lies in [0, 1], got {score}")
        members[min(int(score * bins), bins - 1)].append((score, success))
    return [ReliabilityBin(i / bins, (i + 1) / bins, len(group), sum(s for _, s in group),
                           math.fsum(v for v, _ in group) / len(group))
            for i, group in enumerate(members) if group]
