from __future__ import annotations

import pytest

from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.store import ActionScore, Release, Store, TraceScore
from stash_pipeline_tests.support.store_samples import make_record, make_trace


def scores_of(trace_id: str, evaluator: str, version: int = 1, raw: float = 0.5):
    return [ActionScore(a.id, trace_id, version, evaluator, raw, 0.25)
            for a in make_trace(trace_id).actions()]


def test_pending_scoring_is_per_evaluator_and_version(store: Store) -> None:
    store.import_traces([make_record(make_trace(t)) for t in ("a", "b")])
    assert store.traces_pending_scoring("v1") == [("a", 1), ("b", 1)]
    assert store.save_action_scores("v1", {"a": 1}, scores_of("a", "v1")) == \
        len(make_trace("a").actions())
    assert store.traces_pending_scoring("v1") == [("b", 1)]
    assert store.traces_pending_scoring("v1", limit=0) == []
    # A new release scores everything again.
    assert store.traces_pending_scoring("v2") == [("a", 1), ("b", 1)]
    # A trace without actions is still marked scored.
    store.save_action_scores("v1", {"b": 1}, [])
    assert store.traces_pending_scoring("v1") == []


def test_score_again_replaces_the_previous_run(store: Store) -> None:
    store.import_traces([make_record(make_trace("a"))])
    store.save_action_scores("v1", {"a": 1}, scores_of("a", "v1", raw=0.5))
    store.save_action_scores("v1", {"a": 1}, scores_of("a", "v1", raw=0.9))
    assert [s.raw for s in store.action_scores_for("a")] == \
        [0.9] * len(make_trace("a").actions())
    assert [s.action_id for s in store.action_scores_for("a")] == \
        [a.id for a in make_trace("a").actions()]


def test_scores_of_a_replaced_version_are_dropped(store: Store) -> None:
    store.import_traces([make_record(make_trace("a"))])
    store.import_traces([make_record(make_trace("a", turns=1))])  # now version 2
    assert store.save_action_scores("v1", {"a": 1}, scores_of("a", "v1")) == 0
    assert store.traces_pending_scoring("v1") == [("a", 2)]
    assert store.save_scores([TraceScore("a", 1, "rm", 1.0), TraceScore("a", 2, "rm", 2.0)]) == 1
    assert store.scores_for("a") == [TraceScore("a", 2, "rm", 2.0)]


def test_scores_outside_the_run_are_refused(store: Store) -> None:
    store.import_traces([make_record(make_trace("a"))])
    with pytest.raises(ValueError, match="outside this run"):
        store.save_action_scores("v1", {"a": 1}, scores_of("a", "v2"))
    assert store.action_scores_for("a") == []


def test_latest_score_is_the_newest(store: Store) -> None:
    store.import_traces([make_record(make_trace("a"))])
    store.save_scores([TraceScore("a", 1, "rm-old", 1.0)])
    store.save_scores([TraceScore("a", 1, "rm-new", -3.0, 0.2)])
    assert store.list_traces()[0].latest_score == -3.0
    assert [s.evaluator for s in store.scores_for("a")] == ["rm-new", "rm-old"]


def test_releases_and_benchmark_comparisons(store: Store) -> None:
    assert store.latest_release() is None  # traces wait for the first release
    report = {"overall": {"accuracy": 0.71, "pairs": 534}, "slices": {"tool": {}}}
    snapshot = {"traces": {"a": 1, "b": 3}}
    first = store.save_release(Release("v1", "s3://b/v1.tar.gz", report, snapshot))
    assert (first.version, first.benchmark_report, first.data_snapshot) == \
        ("v1", report, snapshot)
    store.save_release(Release("v2", "s3://b/v2.tar.gz", report, snapshot))
    assert store.latest_release().version == "v2"
    assert [r.version for r in store.list_releases()] == ["v1", "v2"]
    assert store.get_release("v1").checkpoint_uri == "s3://b/v1.tar.gz"
    with pytest.raises(NotFoundError):
        store.get_release("v9")

    lost = store.save_benchmark_comparison(candidate="c3", incumbent="v2", passed=False,
                                           report={"regressions": ["tool=book_flight"]})
    won = store.save_benchmark_comparison(candidate="c4", incumbent="v2", passed=True,
                                          report={})
    assert [c.id for c in store.list_benchmark_comparisons()] == [lost.id, won.id]
    only = store.list_benchmark_comparisons("c3")
    assert [(c.passed, c.report) for c in only] == [(False, {"regressions": ["tool=book_flight"]})]


def test_the_trace_list_shows_the_shared_evaluators_queue(store: Store) -> None:
    store.import_traces([make_record(make_trace(t)) for t in ("a", "b")])
    assert {s.id: s.scoring_state for s in store.list_traces()} == {"a": "waiting",
                                                                   "b": "waiting"}
    store.save_release(Release("v1", "file:///v1.tar.gz", {}, {}))
    store.save_action_scores("v1", {"a": 1}, scores_of("a", "v1"))
    listing = {s.id: s for s in store.list_traces()}
    assert (listing["a"].scoring_state, listing["b"].scoring_state) == ("scored", "pending")
    assert (listing["a"].actions_scored, listing["a"].mean_action_credit) == (
        len(make_trace("a").actions()), pytest.approx(0.25))
    store.import_traces([make_record(make_trace("a", turns=1))])  # a reimport queues it again
    again = {s.id: s for s in store.list_traces()}["a"]
    assert (again.scoring_state, again.actions_scored, again.mean_action_credit) == (
        "pending", 0, None)
