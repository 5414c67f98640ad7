from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from stash_pipeline.core.errors import StashError
from stash_pipeline.core.split import (
    NotEnoughPairsError,
    held_out_count,
    linked_groups,
    split_pairs,
)
from stash_pipeline_tests.support.pair_fixtures import make_pair


@st.composite
def pair_sets(draw):
    trace_count = draw(st.integers(1, 40))
    traces = [f"t{i}" for i in range(trace_count)]
    specs = draw(st.lists(
        st.tuples(st.sampled_from(traces), st.none() | st.sampled_from(traces), st.booleans()),
        min_size=2, max_size=80))
    return [make_pair(i, a, b, tool=tool) for i, (a, b, tool) in enumerate(specs)]


@settings(max_examples=150, deadline=None)
@given(pair_sets())
def test_no_trace_is_in_both_partitions_and_counts_add_up(pairs):
    split = split_pairs(pairs)
    assert not split.train_trace_ids & split.eval_trace_ids
    for pair in split.train:
        assert not set(pair.source_trace_ids) & split.eval_trace_ids
    for pair in split.eval:
        assert set(pair.source_trace_ids) <= split.eval_trace_ids
    assert len(split.train) + len(split.eval) + split.excluded_cross_trace_pairs == len(pairs)


@settings(max_examples=150, deadline=None)
@given(pair_sets())
def test_held_out_share_is_at_most_ten_percent_of_source_traces_in_whole_linked_groups(pairs):
    split = split_pairs(pairs)
    traces = {t for p in pairs for t in p.source_trace_ids}
    groups = linked_groups(pairs)
    if split.eval_available:
        assert split.train and split.eval
        if len(groups) > 1:
            # Whole groups: nothing crosses; at most 10% of the traces unless no group fits.
            assert split.excluded_cross_trace_pairs == 0
            held = [g for g in groups if set(g) <= split.eval_trace_ids]
            assert sum(len(g) for g in held) == len(split.eval_trace_ids)
            target = max(1, len(traces) // 10)
            assert len(split.eval_trace_ids) <= target or len(held) == 1
        else:
            assert len(split.eval_trace_ids) == max(1, len(traces) // 10)
    else:
        assert split.eval == () and split.excluded_cross_trace_pairs == 0
        assert sorted(p.id for p in split.train) == sorted(p.id for p in pairs)
        # Unavailable only when no split into whole linked groups exists.
        assert len(groups) == 1 and split.eval_unavailable_reason


@settings(max_examples=150, deadline=None)
@given(pair_sets())
def test_linked_groups_are_the_connected_components_of_the_pair_graph(pairs):
    groups = linked_groups(pairs)
    group_of = {t: i for i, g in enumerate(groups) for t in g}
    assert sorted(group_of) == sorted({t for p in pairs for t in p.source_trace_ids})
    for pair in pairs:
        assert len({group_of[t] for t in pair.source_trace_ids}) == 1
    # No group splits further: each is connected by its own pairs.
    for group in groups:
        reached, frontier = {group[0]}, [group[0]]
        while frontier:
            trace = frontier.pop()
            for pair in pairs:
                if trace in pair.source_trace_ids:
                    new = set(pair.source_trace_ids) - reached
                    reached |= new
                    frontier.extend(new)
        assert reached == set(group)


@settings(max_examples=100, deadline=None)
@given(pair_sets(), st.randoms(use_true_random=False))
def test_seed_zero_split_is_deterministic_whatever_the_order(pairs, rng):
    shuffled = list(pairs)
    rng.shuffle(shuffled)
    assert split_pairs(pairs) == split_pairs(shuffled)


@settings(max_examples=150, deadline=None)
@given(pair_sets())
def test_cross_partition_pairs_are_counted(pairs):
    split = split_pairs(pairs)
    if split.eval_available:
        crossing = [p for p in pairs
                    if len({t in split.eval_trace_ids for t in p.source_trace_ids}) == 2]
        assert split.excluded_cross_trace_pairs == len(crossing)


def test_held_out_count():
    assert [held_out_count(n) for n in (0, 1, 2, 9, 10, 19, 20, 35, 100)] == [
        0, 0, 1, 1, 1, 1, 2, 3, 10]


def test_all_pairs_from_one_trace_train_and_evaluation_is_unavailable():
    pairs = [make_pair(i, "only") for i in range(5)]
    split = split_pairs(pairs)
    assert len(split.train) == 5 and split.eval == () and not split.eval_available
    assert "one trace" in split.eval_unavailable_reason
    assert split.counts()["eval_pairs"] == 0 and split.counts()["eval_available"] is False


def test_two_pairs_on_two_traces_split_one_and_one():
    split = split_pairs([make_pair(0, "a"), make_pair(1, "b", tool=True)])
    assert len(split.train) == 1 and len(split.eval) == 1
    assert split.counts()["num_pairs"] == 2


def test_every_eval_pair_crossing_partitions_means_no_evaluation():
    # Trace ratings on three traces: any held-out trace only has cross-trace pairs.
    pairs = [make_pair(0, "a", "b"), make_pair(1, "b", "c"), make_pair(2, "a", "c")]
    split = split_pairs(pairs)
    assert not split.eval_available and len(split.train) == 3
    assert split.excluded_cross_trace_pairs == 0
    assert "link all 3 source traces into one group" in split.eval_unavailable_reason
    assert split.counts()["eval_unavailable_reason"] == split.eval_unavailable_reason


def test_fewer_than_two_pairs_is_a_clear_stash_error():
    for pairs in ([], [make_pair(0, "a")]):
        with pytest.raises(NotEnoughPairsError, match="at least 2 usable pairs") as error:
            split_pairs(pairs)
        assert isinstance(error.value, StashError)


def test_counts_report_action_and_tool_pairs_per_partition():
    pairs = [make_pair(i, f"t{i % 20}", tool=i % 3 == 0) for i in range(60)]
    pairs.append(make_pair(99, "t0", "t1"))
    split = split_pairs(pairs)
    counts = split.counts()
    assert counts["train_pairs"] == len(split.train) and counts["eval_pairs"] == len(split.eval)
    assert counts["action_eval_pairs"] == sum(p.kind == "action" for p in split.eval)
    assert counts["tool_eval_pairs"] == sum(p.is_tool_call for p in split.eval)
    assert counts["eval_traces"] == 2 and counts["eval_pairs"] == 6
    assert counts["train_pairs"] + counts["eval_pairs"] + counts[
        "excluded_cross_trace_pairs"] == 61


def test_traces_linked_by_pairs_are_held_out_together():
    # 30 tasks of two traces compared with each other, plus a step pair inside each trace.
    pairs = []
    for task in range(30):
        a, b = f"task{task:02d}-a", f"task{task:02d}-b"
        pairs += [make_pair(3 * task, a, b), make_pair(3 * task + 1, a), make_pair(3 * task + 2, b)]
    split = split_pairs(pairs)
    assert split.excluded_cross_trace_pairs == 0
    assert len(split.eval_trace_ids) == 6 and len(split.eval) == 9  # 10% of 60 traces: 3 tasks
    for trace in split.eval_trace_ids:
        assert trace[:-1] + ("b" if trace.endswith("a") else "a") in split.eval_trace_ids
    assert split.counts()["eval_unavailable_reason"] is None


def test_ten_pairs_on_ten_traces_evaluate():
    # Five groups of two traces, two pairs each: 10% of ten traces is one trace, which no group
    # fits; one whole group is held out rather than none.
    pairs = [make_pair(i, f"t{i // 2 * 2}", f"t{i // 2 * 2 + 1}") for i in range(10)]
    split = split_pairs(pairs)
    assert split.eval_available and len(split.eval) == 2 and len(split.eval_trace_ids) == 2
    assert len(split.train) == 8 and split.excluded_cross_trace_pairs == 0


def test_one_large_group_is_cut_trace_by_trace_and_its_crossing_pairs_counted():
    # A chain links all 20 traces; each also has a step pair: held-out traces keep those.
    pairs = [make_pair(i, f"t{i:02d}", f"t{i + 1:02d}") for i in range(19)]
    pairs += [make_pair(100 + i, f"t{i:02d}") for i in range(20)]
    split = split_pairs(pairs)
    assert split.eval_available and len(split.eval_trace_ids) == 2
    assert split.excluded_cross_trace_pairs >= 2
    assert len(split.train) + len(split.eval) + split.excluded_cross_trace_pairs == len(pairs)
