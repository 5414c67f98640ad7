from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from stash_pipeline.core.sampling import cap_pairs
from stash_pipeline.core.training_settings import DEFAULT_MAX_PAIRS
from stash_pipeline_tests.support.pair_fixtures import make_pair


def test_under_the_cap_everything_is_kept():
    pairs = [make_pair(i, "t") for i in range(5)]
    capped = cap_pairs(list(reversed(pairs)), 5)
    assert capped.pairs == tuple(pairs) and capped.dropped == 0
    assert DEFAULT_MAX_PAIRS == 4000


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 120), st.integers(1, 60), st.randoms(use_true_random=False))
def test_cap_keeps_a_deterministic_seeded_sample_and_reports_the_dropped(count, cap, rng):
    pairs = [make_pair(i, f"t{i % 7}") for i in range(count)]
    shuffled = list(pairs)
    rng.shuffle(shuffled)
    capped = cap_pairs(shuffled, cap)
    assert capped == cap_pairs(pairs, cap)
    assert len(capped.pairs) == min(count, cap) and capped.dropped == max(0, count - cap)
    assert {p.id for p in capped.pairs} <= {p.id for p in pairs}


def test_another_seed_keeps_other_pairs():
    pairs = [make_pair(i, "t") for i in range(100)]
    assert cap_pairs(pairs, 10, seed=0).pairs != cap_pairs(pairs, 10, seed=1).pairs


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, None])
def test_max_pairs_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="max_pairs"):
        cap_pairs([], bad)
