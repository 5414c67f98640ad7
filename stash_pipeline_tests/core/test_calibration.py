"""Action credit and the calibrated score: the seed's formulas, their edge cases, the stats
files."""

import math
import random

import pytest
from hypothesis import given, strategies as st

from stash_pipeline.core.calibration import (
    RewardStats,
    action_credit,
    calibrated_score,
    display_scale_sample,
    reward_stats,
)
from stash_pipeline.core.errors import InputError

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)


def test_credit_is_the_seed_formula():
    stats = RewardStats(mean=0.5, std=2.0)
    assert action_credit(0.5, stats) == 0.0
    assert action_credit(4.5, stats) == pytest.approx(math.tanh(1.0))
    assert action_credit(-3.5, stats) == pytest.approx(math.tanh(-1.0))


def test_calibrated_is_a_logistic_with_one_half_at_the_mean():
    stats = RewardStats(mean=-1.0, std=0.5)
    assert calibrated_score(-1.0, stats) == 0.5
    assert calibrated_score(-0.5, stats) == pytest.approx(1 / (1 + math.exp(-1.0)))
    assert calibrated_score(-2.0, stats) == pytest.approx(1 / (1 + math.exp(2.0)))


@given(raw=finite, mean=finite, std=positive)
def test_credit_bounds_and_symmetry(raw, mean, std):
    stats = RewardStats(mean, std)
    credit = action_credit(raw, stats)
    assert -1.0 <= credit <= 1.0
    assert action_credit(2 * mean - raw, stats) == pytest.approx(-credit, abs=1e-9)


@given(raw=finite, mean=finite, std=positive)
def test_calibrated_stays_strictly_inside_zero_one(raw, mean, std):
    value = calibrated_score(raw, RewardStats(mean, std))
    assert 0.0 < value < 1.0


@given(a=finite, b=finite, mean=finite, std=positive)
def test_both_scores_preserve_order(a, b, mean, std):
    stats = RewardStats(mean, std)
    lo, hi = sorted((a, b))
    assert action_credit(lo, stats) <= action_credit(hi, stats)
    assert calibrated_score(lo, stats) <= calibrated_score(hi, stats)


def test_zero_std_falls_back_to_the_raw_unit_instead_of_dividing_by_zero():
    stats = RewardStats(mean=2.0, std=0.0)
    assert action_credit(2.0, stats) == 0.0
    assert calibrated_score(2.0, stats) == 0.5
    assert action_credit(4.0, stats) == pytest.approx(math.tanh(1.0))
    assert calibrated_score(3.0, stats) == pytest.approx(1 / (1 + math.exp(-1.0)))


def test_extreme_rewards_do_not_overflow():
    stats = RewardStats(mean=0.0, std=1e-6)
    assert action_credit(1e300, stats) == 1.0
    assert 0.0 < calibrated_score(-1e300, stats) < 1e-12
    assert 1.0 - 1e-12 < calibrated_score(1e300, stats) < 1.0


def test_reward_stats_are_population_mean_and_std():
    stats = reward_stats([1.0, 3.0, 5.0, 7.0])
    assert stats.mean == 4.0
    assert stats.std == pytest.approx(math.sqrt(5.0))
    assert stats.count == 4
    assert reward_stats([2.5]).std == 0.0


def test_reward_stats_reject_empty_and_non_finite():
    with pytest.raises(ValueError, match="at least one"):
        reward_stats([])
    with pytest.raises(ValueError, match="reward 1"):
        reward_stats([0.0, float("nan")])


def test_stats_round_trip_through_json_form():
    stats = RewardStats(mean=-0.25, std=1.5, count=12)
    assert RewardStats.from_dict(stats.to_dict()) == stats
    assert RewardStats.from_dict({"mean": 1, "std": 0}) == RewardStats(1.0, 0.0)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"std": 1.0}, "mean"),
        ({"mean": "0.1", "std": 1.0}, "mean"),
        ({"mean": 0.0, "std": float("nan")}, "std"),
        ({"mean": 0.0, "std": -1.0}, "std"),
        ({"mean": True, "std": 1.0}, "mean"),
        ({"mean": 0.0, "std": 1.0, "count": -3}, "count"),
    ],
)
def test_bad_stats_name_the_file_and_field(data, field):
    with pytest.raises(InputError) as caught:
        RewardStats.from_dict(data, file="reward-model/reward_stats.json")
    assert caught.value.field == field
    assert "reward-model/reward_stats.json" in str(caught.value)


def test_stats_that_are_not_an_object_are_rejected():
    with pytest.raises(InputError, match="JSON object"):
        RewardStats.from_dict([0.0, 1.0], file="reward_stats.json")


def test_the_display_scale_uses_every_training_pair_up_to_the_limit():
    kinds = ["trace", "action", "trace", "action"]
    assert display_scale_sample(kinds, limit=4) == ([0, 1, 2, 3], [1, 3])


def test_beyond_the_limit_the_display_scale_is_a_seeded_sample_of_each_kind():
    kinds = ["action" if i % 3 == 0 else "trace" for i in range(1000)]
    everything, actions = display_scale_sample(kinds, limit=256)
    assert len(everything) == len(actions) == 256
    assert all(kinds[i] == "action" for i in actions)
    assert len(set(everything)) == 256 and everything == sorted(everything)
    # Seed 0: the same draw every time, and a different one from another seed.
    assert display_scale_sample(kinds, limit=256) == (everything, actions)
    assert display_scale_sample(kinds, limit=256, seed=1)[0] != everything
    # Spread over the whole set, not its beginning.
    assert max(everything) > 900 and min(everything) < 100


def test_a_sample_of_256_pairs_estimates_the_scale_closely():
    rng = random.Random(7)
    rewards = [(rng.gauss(1.5, 2.0), rng.gauss(-0.5, 2.0)) for _ in range(4000)]
    whole = reward_stats(r for pair in rewards for r in pair)
    picked, _ = display_scale_sample(["trace"] * len(rewards))
    sampled = reward_stats(r for i in picked for r in rewards[i])
    assert abs(sampled.mean - whole.mean) < 0.15 * whole.std
    assert abs(sampled.std - whole.std) < 0.1 * whole.std
