"""Task-clustered intervals (core.clustered): Student's t, Obuchowski's clustered AUC variance,
and the coverage of the clustered AUC interval on data shaped like tau-bench's (38 tasks x 4
trials, a task effect on both the outcome and the score), by simulation."""

from __future__ import annotations

import math
import random

import pytest

from stash_pipeline.core.clustered import (
    auc_influences,
    clustered_variance,
    clustering,
    paired_difference,
    proportion_influences,
    t_quantile,
)
from stash_pipeline.core.estimates import auc, auc_interval


@pytest.mark.parametrize(("df", "expected"), [(1, 12.7062), (2, 4.3027), (5, 2.5706),
                                              (9, 2.2622), (37, 2.0262), (1000, 1.9623)])
def test_t_quantiles_match_the_tables(df, expected):
    assert t_quantile(df) == pytest.approx(expected, abs=2e-3)


def test_the_clustered_auc_variance_is_obuchowskis():
    wins, losses = [3.0, 1.0, 2.5, 0.2], [0.5, 1.5, -1.0]
    win_groups, loss_groups = ["a", "b", "b", "c"], ["a", "c", "c"]
    area, on_wins, on_losses = auc_influences(wins, losses)
    assert area == auc(wins, losses)
    # Obuchowski (1997): per-cluster placement sums V10_i, V01_i against m_i A, n_i A.
    m, n = len(wins), len(losses)
    v10 = {g: 0.0 for g in "abc"}
    v01 = {g: 0.0 for g in "abc"}
    m_i = {g: win_groups.count(g) for g in "abc"}
    n_i = {g: loss_groups.count(g) for g in "abc"}
    for x, g in zip(wins, win_groups):
        v10[g] += sum(1.0 if x > y else 0.5 if x == y else 0.0 for y in losses) / n
    for y, g in zip(losses, loss_groups):
        v01[g] += sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in wins) / m
    clusters = 3
    s10 = clusters / ((clusters - 1) * m) * sum((v10[g] - m_i[g] * area) ** 2 for g in "abc")
    s01 = clusters / ((clusters - 1) * n) * sum((v01[g] - n_i[g] * area) ** 2 for g in "abc")
    s11 = clusters / (clusters - 1) * sum((v10[g] - m_i[g] * area) * (v01[g] - n_i[g] * area)
                                          for g in "abc")
    expected = s10 / m + s01 / n + 2 * s11 / (m * n)
    assert clustered_variance(on_wins + on_losses, win_groups + loss_groups) == \
        pytest.approx(expected)


def test_traces_each_on_their_own_have_no_design_effect():
    _, influences = proportion_influences([1.0, 0.0, 1.0, 1.0, 0.5])
    spread = clustering(influences, range(5))
    assert (spread.groups, spread.design_effect) == (5, 1.0) and spread.too_few_groups
    assert spread.critical == pytest.approx(t_quantile(4))
    assert clustering(influences, ["one"] * 5).critical is None  # one group: no interval


def test_a_paired_difference_of_a_figure_with_itself_is_zero_wide():
    _, influences = proportion_influences([1.0, 0.0, 1.0, 1.0])
    assert paired_difference(0.0, influences, influences, "aabb") == (0.0, 0.0)


def _tau_shaped(rng: random.Random, tasks: int = 38, trials: int = 4):
    """Tasks of varying difficulty: a task's effect raises both its success chance and its
    traces' scores; within a task, success raises the score a little."""
    wins, losses, win_tasks, loss_tasks = [], [], [], []
    for task in range(tasks):
        effect = rng.gauss(0.0, 2.0)
        for _ in range(trials):
            success = rng.random() < 1 / (1 + math.exp(-effect))
            score = 1.5 * effect + 0.3 * success + rng.gauss(0.0, 1.0)
            (wins if success else losses).append(score)
            (win_tasks if success else loss_tasks).append(task)
    return wins, losses, win_tasks, loss_tasks


def test_the_clustered_auc_interval_covers_95_percent_of_the_time_on_tau_shaped_data():
    """38 tasks x 4 trials with a task effect: the clustered interval covers the population
    AUC at least 93% of the time over 600 draws (the independent one, about 91%)."""
    rng = random.Random(49)
    population = [_tau_shaped(rng, tasks=500) for _ in range(20)]
    truth = auc([w for p in population for w in p[0]], [x for p in population for x in p[1]])
    covered = covered_independent = draws = 0
    while draws < 600:
        wins, losses, win_tasks, loss_tasks = _tau_shaped(rng)
        found = auc_influences(wins, losses)
        if found is None:
            continue
        area, on_wins, on_losses = found
        spread = clustering(on_wins + on_losses, win_tasks + loss_tasks)
        low, high = auc_interval(area, len(wins), len(losses), spread.critical)
        covered += low <= truth <= high
        low, high = auc_interval(area, len(wins), len(losses))
        covered_independent += low <= truth <= high
        draws += 1
    assert covered / draws >= 0.93
    assert covered_independent < covered  # what the report said before tasks were respected
