"""Trust reports over the real store (SQLite and PostgreSQL): the facts of one account's traces
the evaluator did not train on, and the report saved whole and as the SQL view's figures."""

from __future__ import annotations

import sqlalchemy as sa

from stash_pipeline.core import trust as core_trust
from stash_pipeline.core.estimates import auc
from stash_pipeline.core.feedback import VerifiedOutcome
from stash_pipeline.core.trust import HANDFUL_NOTE, figures_of
from stash_pipeline.services import trust as trust_service
from stash_pipeline.store import ActionScore, Release, Store, schema
from stash_pipeline_tests.support.store_samples import RAW, TRACES, trust_sample


def test_a_models_report_counts_only_the_owners_traces_it_did_not_train_on(store: Store):
    model_id = trust_sample(store)
    report = trust_service.report(store, "ana", model_id)
    assert report["kind"] == "personal"
    counts = report["traces"]
    assert (counts["considered"], counts["trained_on_left_out"]) == (4, 2)  # a, b trained on
    assert counts["with_outcome"] == 3 and counts["rated_actions"] == 1
    whole = next(f for f in figures_of(report, "outcome_auc_trace_score")
                 if f["slice_kind"] == "all")
    # c succeeded (-1.0) against d (0.0) and e (-2.0); bob's trace is not ana's.
    assert whole["value"] == auc([-1.0], [0.0, -2.0]) == 0.5
    assert whole["detail"] | {"succeeded": 1, "failed": 2} == whole["detail"]
    # One task: no clustered interval can be estimated, and no verdict drawn.
    assert (whole["low"], whole["high"], whole["detail"]["groups"]) == (0.0, 1.0, 1)
    assert report["verdict"]["label"] == "too few tasks (1) to judge"
    tools = {f["slice"] for f in figures_of(report, "outcome_auc_trace_score")
             if f["slice_kind"] == "tool"}
    assert tools == {"get_reservation", "get_user"}
    credit = next(f for f in figures_of(report, "outcome_auc_mean_action_credit")
                  if f["slice_kind"] == "all")
    assert credit["value"] == auc([0.2], [-0.4, 0.2])
    rating = next(f for f in figures_of(report, "spearman_trace_rating")
                  if f["slice_kind"] == "all")
    assert rating["n"] == 3  # c, d, e: rated, scored, not trained on
    assert report["held_out"]["note"] == HANDFUL_NOTE
    truncated = next(iter(figures_of(report, "truncated_traces")))
    assert truncated["detail"]["truncated"] == 3 and truncated["n"] == 4  # d, e, f: 1200+


def test_the_report_is_saved_once_per_change_of_its_facts(store: Store):
    model_id = trust_sample(store)
    first = trust_service.report(store, "ana", model_id)
    again = trust_service.report(store, "ana", model_id)
    assert again["computed_at"] == first["computed_at"]
    with store.reading() as c:
        figures = c.execute(sa.select(schema.trust_figures.c.metric, schema.trust_figures.c.n)
                            .where(schema.trust_figures.c.owner == "ana")).all()
    assert len(figures) == len(first["figures"]) and ("heldout_accuracy", 3) in figures
    store.add_feedback([VerifiedOutcome("o-f", "f", 1.0)], owner="ana")
    changed = trust_service.report(store, "ana", model_id)
    assert changed["computed_at"] != first["computed_at"]
    assert changed["traces"]["with_outcome"] == 4
    with store.reading() as c:
        assert c.scalar(sa.select(sa.func.count()).select_from(schema.trust_reports)) == 1


def test_a_report_saved_in_another_format_is_computed_again(store: Store, monkeypatch):
    model_id = trust_sample(store)
    first = trust_service.report(store, "ana", model_id)
    with store.transaction() as c:  # as an older version of the code saved it: a key since renamed
        c.execute(schema.trust_reports.update().values(
            report={**{k: v for k, v in first.items() if k not in ("traces", "computed_at")},
                    "trace_counts": first["traces"]}))
    # The same format: served as saved.
    assert "traces" not in trust_service.report(store, "ana", model_id)
    monkeypatch.setattr(core_trust, "REPORT_FORMAT", core_trust.REPORT_FORMAT + 1)
    again = trust_service.report(store, "ana", model_id)
    assert again["traces"] == first["traces"] and "trace_counts" not in again
    assert again["computed_at"] != first["computed_at"]


def test_a_releases_report_leaves_out_its_snapshot_and_reads_its_benchmark(store: Store):
    trust_sample(store)
    report_of_gate = {"overall": {"pairs": 40, "candidate": 0.8},
                      "slices": [{"slice": "tool", "value": "get_user", "pairs": 20,
                                  "candidate": 0.9}],
                      "candidate_metrics": {"max_length": 1024}}
    store.save_release(Release("v1", "file:///r", report_of_gate,
                               {"training_traces": {"c": 1}, "benchmark_traces": {}}))
    traces = store.get_traces(list(TRACES))
    for trace in traces:
        store.save_action_scores("v1", {trace.id: 1}, [
            ActionScore(x.id, trace.id, 1, "v1", RAW[trace.id], RAW[trace.id] / 10,
                        input_tokens=2000) for x in trace.actions()])
    report = trust_service.report(store, "ana", "v1")
    assert report["kind"] == "shared" and report["traces"]["trained_on_left_out"] == 1
    assert report["held_out"]["pairs"] == 40 and not report["held_out"]["handful"]
    assert "separate benchmark" in report["held_out"]["source"]
    credit = next(f for f in figures_of(report, "outcome_auc_mean_action_credit")
                  if f["slice_kind"] == "all")
    # a, b succeeded (0.3, 0.2) against d, e (0.0, -0.2); c is in the snapshot.
    assert credit["value"] == 1.0 and credit["n"] == 4
    assert not figures_of(report, "outcome_auc_trace_score")  # the release scored no whole trace
    assert any("whole-trace scores exist only" in note for note in report["notes"])
    actions = next(iter(figures_of(report, "truncated_actions")))
    assert actions["value"] == 1.0
    assert store.trust_owners(["a", "bob-1"]) == ["ana", "bob"]
