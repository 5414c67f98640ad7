"""The shared evaluator's data: opted-in traces split into training and benchmark by task group."""

from __future__ import annotations

import itertools

import pytest

from stash_pipeline.core.feedback import Comment, Rating, ReviewedComparison, VerifiedOutcome
from stash_pipeline.core.pair_builders import build_feedback_pairs
from stash_pipeline.core.shared_data import (
    OverlapError,
    assign_roles,
    benchmark_pairs,
    check_disjoint,
    crossing_comparisons,
    group_key,
    in_benchmark_share,
    not_trainable_advice,
)
from stash_pipeline.pipelines.training_pairs import training_pairs
from stash_pipeline_tests.support.pair_fixtures import tool_trace


def task_in_share(inside: bool, domain: str = "airline") -> str:
    """A task id whose group the stable hash puts in (or out of) the benchmark's share."""
    return next(f"task-{i}" for i in itertools.count()
                if in_benchmark_share(f"task:{domain}:task-{i}") == inside)


def traced(trace_id: str, task: str | None, contribute: bool = True):
    metadata = {} if task is None else {"task_id": task}
    return tool_trace(trace_id, domain="airline", contribute=contribute, metadata=metadata)


def reviewed(cid: str, chosen: str, rejected: str, **fields) -> ReviewedComparison:
    return ReviewedComparison(cid, chosen, rejected, f"{chosen}/m5", f"{rejected}/m7",
                              **{"author": "ana", "reviewer": "bo", **fields})


def test_the_stable_hash_keeps_about_its_share_and_never_moves_a_group():
    keys = [f"task:airline:{i}" for i in range(2000)]
    share = sum(map(in_benchmark_share, keys)) / len(keys)
    assert 0.17 < share < 0.23
    assert [in_benchmark_share(k) for k in keys[:50]] == [in_benchmark_share(k) for k in keys[:50]]
    assert group_key(traced("t1", "7")) == "task:airline:7"
    assert group_key(traced("t1", None)) == "trace:t1"


def test_outcomes_and_a_share_of_reviewed_tasks_form_the_benchmark_the_rest_trains():
    bench_task, train_task = task_in_share(True), task_in_share(False)
    traces = [traced("o1", "outcome-task"), traced("o2", "outcome-task"),
              traced("b1", bench_task), traced("b2", bench_task),
              traced("r1", train_task), traced("r2", train_task),
              traced("s1", None), traced("private", bench_task, contribute=False)]
    feedback = [VerifiedOutcome("w", "o1", 1.0), VerifiedOutcome("l", "o2", 0.0),
                reviewed("cb", "b1", "b2"), reviewed("cr", "r1", "r2"),
                Rating("up", "s1", 1, "s1/m5"), Rating("down", "s1", 0, "s1/m7")]
    roles = assign_roles(traces, feedback)
    assert sorted(t.id for t in roles.benchmark) == ["b1", "b2", "o1", "o2"]
    assert sorted(t.id for t in roles.training) == ["r1", "r2", "s1"]  # never "private"
    bench = benchmark_pairs(roles.benchmark, feedback)
    assert sorted(p.source_kind for p in bench) == ["reviewed_comparison", "verified_outcome"]
    train = build_feedback_pairs(roles.training, feedback, "shared")
    assert sorted(p.source_id for p in train) == ["cr", "up>down"]
    assert check_disjoint(train, bench)["traces_in_both"] == 0


def test_a_task_the_incumbent_trained_on_never_enters_the_benchmark():
    traces = [traced("o1", "T"), traced("o2", "T")]
    feedback = [VerifiedOutcome("w", "o1", 1.0), VerifiedOutcome("l", "o2", 0.0)]
    roles = assign_roles(traces, feedback, trained_before={"o2"})
    assert roles.benchmark == () and roles.kept_for_training == {"task:airline:T"}
    assert roles.counts() == {"training_traces": 2, "benchmark_traces": 0,
                              "kept_out_of_benchmark": 1}


def test_only_independently_reviewed_comparisons_benchmark_and_crossings_are_counted():
    bench_task, train_task = task_in_share(True), task_in_share(False)
    traces = [traced("b1", bench_task), traced("b2", bench_task), traced("r1", train_task)]
    feedback = [reviewed("ok", "b1", "b2"),
                reviewed("self", "b2", "b1", reviewer="ana"),
                reviewed("pending", "b1", "b2", status="pending"),
                reviewed("across", "b1", "r1"),
                Comment("k", "b1", "nice", "b1/m5")]
    roles = assign_roles(traces, feedback)
    assert [p.source_id for p in benchmark_pairs(roles.benchmark, feedback)] == ["ok"]
    assert crossing_comparisons(roles, feedback) == 1
    # "across" joins neither side's pairs.
    assert build_feedback_pairs(roles.training, feedback, "shared") == []


def test_a_trace_in_both_is_refused_naming_it():
    trace = traced("t1", None)
    feedback = [Rating("a", "t1", 1, "t1/m5"), Rating("b", "t1", 0, "t1/m7")]
    pairs = build_feedback_pairs([trace], feedback, "shared")
    with pytest.raises(OverlapError, match="t1"):
        check_disjoint(pairs, pairs)


def test_a_comparison_orphaned_by_a_reimport_neither_benchmarks_nor_breaks_the_benchmark():
    bench_task = task_in_share(True)
    traces = [traced("b1", bench_task), traced("b2", bench_task),
              traced("o1", "outcome-task"), traced("o2", "outcome-task")]
    # "b1/m99" no longer exists (a shorter reimport): the comparison is kept but makes no pair.
    orphaned = ReviewedComparison("gone", "b1", "b2", "b1/m99", "b2/m7", author="ana",
                                  reviewer="bo")
    feedback = [orphaned, VerifiedOutcome("w", "o1", 1.0), VerifiedOutcome("l", "o2", 0.0)]
    roles = assign_roles(traces, feedback)
    assert sorted(t.id for t in roles.benchmark) == ["o1", "o2"]  # b1, b2 have no usable review
    assert [p.source_kind for p in benchmark_pairs(traces, feedback)] == ["verified_outcome"]


def test_outcome_labelled_data_says_outcomes_are_benchmark_only_and_what_would_train():
    traces = [traced("o1", "7"), traced("o2", "7"), traced("o3", "9"), traced("o4", "9")]
    feedback = [VerifiedOutcome("w7", "o1", 1.0), VerifiedOutcome("l7", "o2", 0.0),
                VerifiedOutcome("w9", "o3", 1.0), VerifiedOutcome("l9", "o4", 0.0)]
    roles = assign_roles(traces, feedback)
    assert not roles.training
    bench = benchmark_pairs(roles.benchmark, feedback)
    assembled = training_pairs(roles.training, feedback, audience="shared", extract=False)
    assert assembled.split is None
    advice = not_trainable_advice(bench)
    assert advice.startswith("2 verified-outcome pair(s) are benchmark-only (the seed's rule)")
    assert "step ratings, corrections and independently reviewed comparisons" in advice
    assert "outside the benchmark's 2 task group(s) (task:airline:7, task:airline:9)" in advice
    assert "add ratings, comments or comparisons on the selected traces" not in advice
