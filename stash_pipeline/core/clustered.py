"""Intervals that respect groups (docs/trust.md, Groups): traces of one task are not independent
(four trials of a task share its difficulty), so a figure's interval is widened by its design
effect, and a difference of two figures on the same traces gets a paired, clustered interval.

Every figure here is asymptotically a sum of per-item influences (its first-order change when an
item is added); a group's influence is the sum of its items'. The clustered variance is
``G / (G - 1) * sum(group influence ** 2)`` over ``G`` groups (for an AUC this is Obuchowski's
1997 clustered variance; for a proportion the cluster-robust variance of a ratio). The design
effect is that variance over the same formula with every item its own group, never below 1: a
figure's score-type interval (Wilson's, the inverted Hanley-McNeil, Fisher's z) keeps its shape
and its refusal to collapse at an edge, with its critical value ``t(G - 1) * sqrt(design
effect)`` instead of 1.96. Student's t with G - 1 degrees of freedom is the usual small-sample
correction for a cluster-robust variance. Pure.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

# A slice drawn from fewer groups than this says so instead of drawing a verdict: its clustered
# variance rests on too few groups to be read (Cameron and Miller 2015 put the trouble at
# "fewer than 20 to 50"; under 10 the t correction itself is unreliable).
MIN_GROUPS = 10
CONFIDENCE = 0.975  # the upper quantile of a two-sided 95% interval


def t_quantile(df: int, p: float = CONFIDENCE) -> float:
    """Student's t quantile with ``df`` degrees of freedom (Hill's 1970 expansion of the normal
    quantile, Abramowitz and Stegun 26.7.5: within 1e-4 from 3 degrees of freedom; exact
    values for 1 and 2)."""
    if df < 1:
        raise ValueError(f"t needs at least 1 degree of freedom, got {df}")
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) * math.sqrt(2 / (4 * p * (1 - p)))
    z = _normal_quantile(p)
    terms = ((z ** 3 + z) / 4,
             (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96,
             (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384,
             (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160)
    return z + sum(term / df ** (k + 1) for k, term in enumerate(terms))


def _normal_quantile(p: float) -> float:
    """The standard normal quantile, by bisection on erf (exact to double precision)."""
    low, high = -10.0, 10.0
    for _ in range(100):
        middle = (low + high) / 2
        if 0.5 * (1 + math.erf(middle / math.sqrt(2))) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def clustered_variance(influences: Sequence[float], groups: Sequence[Hashable]) -> float | None:
    """``G / (G - 1) * sum over groups of (sum of its items' influences) ** 2``; None under two
    groups, where it cannot be estimated."""
    if len(influences) != len(groups):
        raise ValueError(f"{len(influences)} influences against {len(groups)} groups")
    sums: dict[Hashable, float] = defaultdict(float)
    for value, group in zip(influences, groups):
        sums[group] += value
    count = len(sums)
    if count < 2:
        return None
    return count / (count - 1) * math.fsum(v * v for v in sums.values())


@dataclass(frozen=True)
class Clustering:
    """How a figure's interval is widened: its groups, its design effect and the critical value
    that replaces 1.96 (None: under two groups, no interval can be estimated)."""

    groups: int
    design_effect: float
    critical: float | None

    @property
    def too_few_groups(self) -> bool:
        return self.groups < MIN_GROUPS

    def detail(self) -> dict[str, float | int | bool]:
        return {"groups": self.groups, "design_effect": self.design_effect,
                "too_few_groups": self.too_few_groups}


def clustering(influences: Sequence[float], groups: Sequence[Hashable]) -> Clustering:
    """The design effect of a figure with these per-item influences on these groups, and its
    critical value ``t(G - 1) * sqrt(design effect)``."""
    count = len(set(groups))
    clustered = clustered_variance(influences, groups)
    count_items = len(influences)  # every item its own group: no sums to make
    independent = (None if count_items < 2 else
                   count_items / (count_items - 1) * math.fsum(v * v for v in influences))
    if clustered is None or independent is None:
        return Clustering(count, 1.0, None)
    effect = max(1.0, clustered / independent) if independent > 0 else 1.0
    return Clustering(count, effect, t_quantile(count - 1) * math.sqrt(effect))


# Influences ------------------------------------------------------------------------------------

def auc_influences(positives: Sequence[float], negatives: Sequence[float]
                   ) -> tuple[float, list[float], list[float]] | None:
    """(AUC, each positive's influence, each negative's): a positive's is its placement (the
    share of negatives it outscores, ties half) minus the AUC, over the positives' count; a
    negative's likewise. None without both groups."""
    m, n = len(positives), len(negatives)
    if not m or not n:
        return None
    below, above = sorted(negatives), sorted(positives)
    placed_positives = [(bisect_left(below, x) + 0.5 * (bisect_right(below, x)
                                                        - bisect_left(below, x))) / n
                        for x in positives]
    placed_negatives = [(m - bisect_right(above, y) + 0.5 * (bisect_right(above, y)
                                                            - bisect_left(above, y))) / m
                        for y in negatives]
    area = math.fsum(placed_positives) / m
    return (area, [(v - area) / m for v in placed_positives],
            [(v - area) / n for v in placed_negatives])


def proportion_influences(values: Sequence[float]) -> tuple[float, list[float]] | None:
    """(mean, each item's influence) of values in [0, 1] (1 right, 0 wrong, 0.5 a tie); None
    for none."""
    if not values:
        return None
    mean = math.fsum(values) / len(values)
    return mean, [(v - mean) / len(values) for v in values]


def correlation_influences(xs: Sequence[float], ys: Sequence[float]) -> list[float]:
    """Each point's influence on Pearson's correlation of ``xs`` and ``ys`` (for Spearman's, of
    their ranks): ``(u v - r (u^2 + v^2) / 2) / n`` of the standardised values."""
    n = len(xs)
    mx, my = math.fsum(xs) / n, math.fsum(ys) / n
    sx = math.sqrt(math.fsum((x - mx) ** 2 for x in xs) / n)
    sy = math.sqrt(math.fsum((y - my) ** 2 for y in ys) / n)
    if sx == 0 or sy == 0:
        return [0.0] * n
    us, vs = [(x - mx) / sx for x in xs], [(y - my) / sy for y in ys]
    r = math.fsum(u * v for u, v in zip(us, vs)) / n
    return [(u * v - r * (u * u + v * v) / 2) / n for u, v in zip(us, vs)]


def paired_difference(difference: float, first: Sequence[float], second: Sequence[float],
                      groups: Sequence[Hashable], low: float = -1.0, high: float = 1.0
                      ) -> tuple[float, float] | None:
    """The clustered 95% interval of ``difference`` = figure(first) - figure(second), two
    figures of the same items with these influences: a Wald interval of the influences'
    differences summed by group, ``t(G - 1)``, kept within [low, high]; None under two
    groups."""
    variance = clustered_variance([a - b for a, b in zip(first, second, strict=True)], groups)
    if variance is None:
        return None
    half = t_quantile(len(set(groups)) - 1) * math.sqrt(variance)
    return max(low, difference - half), min(high, difference + half)
