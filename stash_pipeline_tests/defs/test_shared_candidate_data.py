"""What a shared-evaluator candidate learns from and is benchmarked on, as shared_training_pairs
stores it: opted-in traces only, only permitted sources, no trace in both training and benchmark."""

from __future__ import annotations

import dagster as dg

from stash_pipeline.core.feedback import (
    Comment,
    Rating,
    ReviewedComparison,
    VerifiedOutcome,
    feedback_id,
)
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline_tests.support.shared_samples import contributions, trace


def build_pairs(instance: dg.DagsterInstance) -> tuple[str, dict]:
    """Materialise shared_training_pairs alone; the candidate and its metadata."""
    job = definitions().resolve_job_def("shared_evaluator_training")
    result = job.execute_in_process(instance=instance,
                                    asset_selection=[dg.AssetKey("shared_training_pairs")])
    assert result.success
    [event] = result.asset_materializations_for_node("shared_training_pairs")
    metadata = {key: value.value for key, value in event.metadata.items()}
    return metadata["candidate"], metadata


def sources(store, candidate: str, split: str | None = None) -> set[str]:
    return {t for p in store.load_pairs(candidate=candidate, split=split)
            for t in p.source_trace_ids}


def test_opting_out_excludes_a_traces_data_from_the_next_candidate(store, instance):
    ana, bo = contributions("airline", 3), contributions("retail", 3, owner="bo")
    store.import_traces(ana + bo)
    first, _ = build_pairs(instance)
    assert sources(store, first) == {r.trace.id for r in ana + bo}
    store.set_contribute(bo[0].trace.id, False, owner="bo")
    second, report = build_pairs(instance)
    assert second != first
    assert sources(store, second) == {r.trace.id for r in ana + bo[1:]}
    assert sources(store, first) == {r.trace.id for r in ana + bo}  # the past candidate stays


def test_no_trace_is_in_both_training_and_benchmark(store, instance):
    used: set[str] = set()
    training = contributions("airline", 4, used=used)
    benchmark = contributions("retail", 3, benchmark=True, used=used)
    # A task with verified outcomes is benchmark, though a trace of it also has step ratings.
    won, lost = (trace("weather", i, task_id="w-task") for i in (0, 1))
    outcomes = [
        ImportedTrace(won, (VerifiedOutcome(feedback_id("outcome", won.id), won.id, 1.0),
                            Rating("up", won.id, 1.0, f"{won.id}/m2.call0"),
                            Rating("down", won.id, -1.0, f"{won.id}/m4.call0")), "w:0"),
        ImportedTrace(lost, (VerifiedOutcome(feedback_id("outcome", lost.id), lost.id, 0.0),),
                      "w:1")]
    # A reviewed comparison across a training trace and a benchmark trace belongs to neither.
    across = ReviewedComparison("across", training[0].trace.id, benchmark[0].trace.id,
                                f"{training[0].trace.id}/m2.call0", f"{benchmark[0].trace.id}/m2",
                                reviewer="lead", status="approved", author="ana")
    store.import_traces(training + benchmark + outcomes)
    store.add_feedback([across])
    candidate, report = build_pairs(instance)
    trained, benchmarked = sources(store, candidate), sources(store, candidate, "benchmark")
    assert trained == {r.trace.id for r in training}
    assert benchmarked == {r.trace.id for r in benchmark} | {won.id, lost.id}
    assert trained.isdisjoint(benchmarked) and report["traces_in_both"] == 0
    bench_pairs = store.load_pairs(candidate=candidate, split="benchmark")
    assert sorted({p.source_kind for p in bench_pairs}) == ["reviewed_comparison",
                                                            "verified_outcome"]
    assert "across" not in {p.source_id for p in store.load_pairs(candidate=candidate)}
    assert "across" not in {p.source_id for p in bench_pairs}
    assert "| comparisons across training and benchmark (unused) | 1 |" in report["traces"]
    # The outcome task's step ratings train nothing: its traces are benchmark traces.
    assert "up>down" not in {p.source_id for p in store.load_pairs(candidate=candidate)}


def test_comments_and_unreviewed_comparisons_never_train_the_shared_evaluator(store, instance):
    [rated] = contributions("airline", 1)
    t = rated.trace
    good, bad = f"{t.id}/m2.call0", f"{t.id}/m4.call0"
    unreviewed = [
        ReviewedComparison("pending", t.id, t.id, good, bad, status="pending", author="ana"),
        ReviewedComparison("self", t.id, t.id, good, bad, reviewer="ana", author="ana"),
        ReviewedComparison("anonymous", t.id, t.id, good, bad, reviewer="lead"),
        ReviewedComparison("rejected", t.id, t.id, good, bad, reviewer="lead", author="ana",
                           status="rejected"),
    ]
    comment = Comment("k1", t.id, "Cancelling every booking was wrong.", bad, author="ana")
    store.import_traces([ImportedTrace(t, (*rated.feedback, *unreviewed, comment), "a:1")])
    candidate, report = build_pairs(instance)
    pairs = store.load_pairs(candidate=candidate)
    assert {p.source_kind for p in pairs} == {"step_rating", "reviewed_comparison"}
    assert {p.source_id for p in pairs if p.source_kind == "reviewed_comparison"} == {
        rated.feedback[0].id}  # the independently reviewed one only
    assert "| comment | 0 |" in report["by_source"]
    assert "| not extracted: comment | 0 |" in report["extraction"]  # not even pending
