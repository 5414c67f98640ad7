"""Figures and their 95% intervals (core.estimates) against published and hand-computed values,
and against scipy where it is installed."""

from __future__ import annotations

import math
import random

import pytest

from stash_pipeline.core.estimates import (
    Z95,
    auc,
    auc_interval,
    average_ranks,
    hanley_mcneil_se,
    reliability_bins,
    spearman,
    spearman_interval,
    wilson_interval,
)


def test_the_wilson_interval_matches_published_values():
    # Newcombe (1998), Table I: 81/263 and 15/148, two-sided 95%.
    assert wilson_interval(81, 263) == pytest.approx((0.2553, 0.3662), abs=1e-4)
    assert wilson_interval(15, 148) == pytest.approx((0.0624, 0.1605), abs=1e-4)
    # Three of three is not certainty: the interval reaches down to 0.44.
    assert wilson_interval(3, 3) == pytest.approx((0.4385, 1.0), abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_average_ranks_share_ties():
    assert average_ranks([10, 30, 20, 20]) == [1.0, 4.0, 2.5, 2.5]
    assert average_ranks([]) == []


def test_auc_counts_each_succeeded_against_each_failed_with_ties_half():
    # By hand: 0.9 and 0.8 beat all three; 0.4 loses to 0.5, ties 0.4, beats 0.1: 7.5 of 9.
    assert auc([0.9, 0.8, 0.4], [0.5, 0.4, 0.1]) == pytest.approx(7.5 / 9)
    assert auc([3, 4], [1, 2]) == 1.0 and auc([1, 2], [3, 4]) == 0.0
    assert auc([2.0], [2.0]) == 0.5
    assert auc([1.0], []) is None and auc([], [1.0]) is None


def test_hanley_mcneil_standard_error_matches_their_worked_example():
    # Hanley and McNeil (1982), the CT example: AUC 0.893, 51 abnormal and 58 normal: SE 0.032.
    assert hanley_mcneil_se(0.893, 51, 58) == pytest.approx(0.0325, abs=5e-4)


def test_the_auc_interval_is_a_score_interval_that_never_collapses_at_the_edges():
    low, high = auc_interval(1.0, 2, 2)
    assert high == 1.0 and low == pytest.approx(0.3856, abs=1e-3)  # 2 vs 2, all right
    assert auc_interval(0.0, 3, 4)[0] == 0.0 and auc_interval(0.0, 3, 4)[1] > 0.3
    low, high = auc_interval(7.5 / 9, 3, 3)
    assert low < 7.5 / 9 < high
    # Each end solves (AUC - a)^2 = z^2 V(a), V being Hanley-McNeil's variance at a with both
    # sizes replaced by their mean (here equal, so exactly Hanley-McNeil's).
    for end in (low, high):
        assert (7.5 / 9 - end) ** 2 == pytest.approx(
            Z95 ** 2 * hanley_mcneil_se(end, 3, 3) ** 2, rel=1e-6)
    # Large groups: the Wald interval of Hanley-McNeil's standard error.
    low, high = auc_interval(0.7, 400, 400)
    se = hanley_mcneil_se(0.7, 400, 400)
    assert (low, high) == pytest.approx((0.7 - Z95 * se, 0.7 + Z95 * se), abs=2e-3)
    assert auc_interval(0.5, 0, 3) == (0.0, 1.0)


def test_spearman_is_pearson_of_average_ranks():
    # By hand: ranks of y are 1, 2, 3.5, 5, 3.5, so rho = 8 / sqrt(10 * 9.5).
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2], [1, 2]) is None  # under three points
    assert spearman([1, 1, 1], [1, 2, 3]) is None  # a constant side
    with pytest.raises(ValueError):
        spearman([1, 2, 3], [1, 2])


def test_the_spearman_interval_is_fisher_z_with_bonett_wright_variance():
    # By hand: atanh(0.5) = 0.549306, se = sqrt(1.125 / 25) = 0.212132.
    low, high = spearman_interval(0.5, 28)
    assert (low, high) == pytest.approx((math.tanh(0.549306 - Z95 * 0.212132),
                                         math.tanh(0.549306 + Z95 * 0.212132)), abs=1e-5)
    assert spearman_interval(0.9, 3) == (-1.0, 1.0)
    low, high = spearman_interval(1.0, 10)
    assert -1 < low < 1 and high <= 1.0


def test_reliability_bins_count_success_by_score_bin():
    scores = [0.05, 0.12, 0.18, 0.55, 0.58, 1.0]
    succeeded = [False, False, True, True, True, True]
    bins = reliability_bins(scores, succeeded)
    assert [(b.low, b.high, b.n, b.successes) for b in bins] == [
        (0.0, 0.1, 1, 0), (0.1, 0.2, 2, 1), (0.5, 0.6, 2, 2), (0.9, 1.0, 1, 1)]
    assert bins[1].rate == 0.5 and bins[1].mean_score == pytest.approx(0.15)
    assert bins[1].interval == wilson_interval(1, 2)
    with pytest.raises(ValueError):
        reliability_bins([1.5], [True])


def test_against_scipy_when_installed():
    stats = pytest.importorskip("scipy.stats", reason="scipy is not installed")
    rng = random.Random(0)
    xs = [rng.randint(0, 5) for _ in range(40)]
    ys = [x + rng.gauss(0, 2) for x in xs]
    assert spearman(xs, ys) == pytest.approx(stats.spearmanr(xs, ys).statistic)
    positives, negatives = ys[:15], ys[15:]
    u = stats.mannwhitneyu(positives, negatives).statistic
    assert auc(positives, negatives) == pytest.approx(u / (15 * 25))
    low, high = stats.binomtest(7, 12).proportion_ci(method="wilson")
    assert wilson_interval(7, 12) == pytest.approx((low, high))
