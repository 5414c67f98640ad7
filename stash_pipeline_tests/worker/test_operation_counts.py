"""The GPU's launch count, held on a CPU: aten operations per training pair and per scored action
stay under the ceilings issue 42 measured (benchmarks/operation_counts.py counts them)."""

from __future__ import annotations

import pytest

from stash_pipeline_tests.support.benchmarks import benchmark

counts = benchmark("operation_counts", "models")
CEILING, MIN_PAIR_RATIO = counts.CEILING, counts.MIN_PAIR_RATIO
per_action, per_pair = counts.per_action, counts.per_pair
scoring_ops, training_ops = counts.scoring_ops, counts.training_ops

# A short window keeps the test quick; the budgets scale with it, so pairs group as at 1024 tokens
# and the count is the same.
WINDOW = 64


@pytest.mark.slow
def test_a_training_pair_costs_at_most_the_ceiling_and_a_fifth_of_todays():
    ours, today = per_pair(training_ops(True, WINDOW)), per_pair(training_ops(False, WINDOW))
    assert ours <= CEILING["per_pair"], (ours, CEILING)
    assert today / ours >= MIN_PAIR_RATIO, (today, ours)


@pytest.mark.slow
def test_a_scored_action_costs_at_most_the_ceiling():
    ours = per_action(scoring_ops(True, WINDOW))
    assert ours <= CEILING["per_action"], (ours, CEILING)
