"""The release's scoring with the database as the queue: the one background sensor hands pending
trace versions out in batches, each run scores one batch with the current release (action credit
and scoring marks), and nothing is missed or doubled."""

from __future__ import annotations

from dataclasses import replace

import dagster as dg
import pytest

from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.dagster_runs.in_process import run_sensor_requests
from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.defs.scoring.sensors import (
    BACKGROUND_TAG,
    MAX_SCORING_RUNS,
    batch_config,
    pending_scoring,
)
from stash_pipeline.pipelines.trace_scoring import ScoringBatch
from stash_pipeline.store import Release
from stash_pipeline_tests.support.shared_samples import trace

pytestmark = pytest.mark.slow


def record(i: int, domain: str = "airline", **fields) -> ImportedTrace:
    t = replace(trace(domain, i, task_id=None, contribute=False), **fields)
    return ImportedTrace(trace=t, feedback=(), source=f"{t.id}:1")


def tick(instance: dg.DagsterInstance, cursor: str | None = None):
    defs = definitions()
    context = dg.build_sensor_context(instance=instance, definitions=defs, cursor=cursor,
                                      instance_ref=instance.get_ref(), resources=defs.resources)
    return pending_scoring.evaluate_tick(context)


def batches(result) -> list[list[tuple[str, int]]]:
    out = []
    for request in result.run_requests:
        config = request.run_config["ops"]["trace_scores"]["config"]
        assert (config["evaluator"], config["actions"], config["whole_traces"]) == ("r1", True,
                                                                                     False)
        out.append(list(zip(config["trace_ids"], config["versions"])))
    return out


def release_batch(batch: list[tuple[str, int]]) -> dict:
    """The run config of a background chunk of the release r1 over ``batch``."""
    return batch_config(ScoringBatch("r1", True, False, dict(batch)))


def test_traces_wait_before_the_first_release(store, instance):
    store.import_traces([record(i) for i in range(3)])
    result = tick(instance)
    assert result.run_requests == [] and "first release" in result.skip_message
    assert {row.scoring_state for row in store.list_traces()} == {"waiting"}
    assert run_sensor_requests(instance, definitions(), "pending_scoring") == []


def test_fifty_imports_between_two_ticks_are_all_scored(store, instance, release, monkeypatch):
    monkeypatch.setenv("STASH_SCORING_BATCH", "25")
    for i in range(50):  # fifty separate imports, one trace each, before the sensor looks
        store.import_traces([record(i, "retail" if i % 2 else "airline")])
    first = tick(instance)
    handed_out = [p for batch in batches(first) for p in batch]
    assert [len(batch) for batch in batches(first)] == [25, 25]
    assert (sorted(handed_out) == sorted(store.traces_pending_scoring("r1"))
            and len(handed_out) == 50)
    assert len({r.run_key for r in first.run_requests}) == 2
    assert {r.tags[BACKGROUND_TAG] for r in first.run_requests} == {"r1"}

    runs = run_sensor_requests(instance, definitions(), "pending_scoring")
    assert [run.status for run in runs] == [dg.DagsterRunStatus.SUCCESS] * 2
    assert store.traces_pending_scoring("r1") == []
    listing = store.list_traces()
    assert len(listing) == 50 and {row.scoring_state for row in listing} == {"scored"}
    assert all(row.actions_scored == row.actions == 2 for row in listing)
    assert tick(instance).run_requests == []


def test_a_batch_in_flight_is_not_handed_out_twice_and_a_failed_one_is_again(
        store, instance, release, monkeypatch):
    monkeypatch.setenv("STASH_SCORING_BATCH", "2")
    store.import_traces([record(i) for i in range(3)])
    pending = store.traces_pending_scoring("r1")
    job = definitions().resolve_job_def("trace_scoring")
    queued = instance.create_run_for_job(job, run_config=release_batch(pending[:2]),
                                         tags={BACKGROUND_TAG: "r1"})  # not started yet
    first = tick(instance, cursor="6")
    assert batches(first) == [pending[2:]]
    assert [r.run_key for r in first.run_requests] == ["auto:r1:7:0"]
    # The queued run dies: its traces are still pending, and the next tick hands them out anew.
    instance.report_run_failed(queued)
    again = tick(instance, cursor=first.cursor)
    assert batches(again) == [pending[:2], pending[2:]]
    assert [r.run_key for r in again.run_requests] == ["auto:r1:8:0", "auto:r1:8:1"]


def test_a_backlog_waits_in_the_database_beyond_the_runs_in_flight(store, instance, release,
                                                                   monkeypatch):
    monkeypatch.setenv("STASH_SCORING_BATCH", "2")
    store.import_traces([record(i) for i in range(7)])
    pending = store.traces_pending_scoring("r1")
    result = tick(instance)
    assert batches(result) == [pending[i:i + 2] for i in range(0, 2 * MAX_SCORING_RUNS, 2)]
    assert store.traces_pending_scoring("r1") == pending  # nothing is lost: still queued


def test_a_failed_scoring_run_leaves_its_traces_pending(store, instance, release, home):
    store.save_release(Release("r2", release.checkpoint_uri.replace("r1", "missing"), {}, {}))
    store.import_traces([record(i) for i in range(2)])
    [run] = run_sensor_requests(instance, definitions(), "pending_scoring")
    assert run.status == dg.DagsterRunStatus.FAILURE
    assert not list((home / "jobs").rglob("*.*"))  # its job directory went with the run
    assert len(store.traces_pending_scoring("r2")) == 2
    assert {row.scoring_state for row in store.list_traces()} == {"pending"}


def test_a_reimport_is_requeued_with_its_old_action_scores_gone(store, instance, release):
    store.import_traces([record(0), record(1)])
    run_sensor_requests(instance, definitions(), "pending_scoring")
    old = record(0)
    old_ids = {a.id for a in old.trace.actions()}
    assert {s.action_id for s in store.action_scores_for(old.trace.id, "r1")} == old_ids

    edited = old.trace.messages[:3]  # the bad action is gone: one action left
    store.import_traces([ImportedTrace(replace(old.trace, messages=edited), (), old.source)])
    assert store.action_scores_for(old.trace.id, "r1") == []
    assert store.traces_pending_scoring("r1") == [(old.trace.id, 2)]
    row = {r.id: r for r in store.list_traces()}[old.trace.id]
    assert (row.scoring_state, row.actions_scored, row.mean_action_credit) == ("pending", 0, None)

    [run] = run_sensor_requests(instance, definitions(), "pending_scoring")
    assert run.status == dg.DagsterRunStatus.SUCCESS
    rescored = store.action_scores_for(old.trace.id, "r1")
    assert [(s.action_id, s.trace_version) for s in rescored] == [(f"{old.trace.id}/m2.call0", 2)]
    assert store.traces_pending_scoring("r1") == []


def test_each_action_is_scored_from_its_context_alone_with_the_releases_credit(
        store, instance, release, shared_checkpoint):
    from stash_pipeline.worker.render import cut_at_action, render_trace
    from stash_pipeline.worker.scoring import RewardModel

    imported = record(7, "retail")
    store.import_traces([imported])
    run_sensor_requests(instance, definitions(), "pending_scoring")
    stored = {s.action_id: s for s in store.action_scores_for(imported.trace.id, "r1")}
    model = RewardModel(shared_checkpoint)
    assert model.audience == "shared"  # system instructions and the evaluation context
    for action in imported.trace.actions():
        alone = render_trace(model.tokenizer, cut_at_action(imported.trace, action.id), "shared",
                             open_end=True)
        [raw] = model.score([alone])
        assert stored[action.id].raw == pytest.approx(raw, abs=1e-4)
        assert stored[action.id].credit == pytest.approx(model.credit(raw), abs=1e-4)


def test_with_every_scoring_run_slot_taken_the_tick_skips(store, instance, release):
    store.import_traces([record(i) for i in range(MAX_SCORING_RUNS + 1)])
    pending = store.traces_pending_scoring("r1")
    for index in range(MAX_SCORING_RUNS):
        instance.add_run(dg.DagsterRun(
            job_name="trace_scoring", run_id=f"busy-{index}",
            status=dg.DagsterRunStatus.STARTED, tags={BACKGROUND_TAG: "r1"},
            run_config=release_batch([pending[index]])))
    result = tick(instance)
    assert result.run_requests == [] and "in flight" in result.skip_message
    assert store.traces_pending_scoring("r1") == pending


def test_a_release_queueing_cut_short_is_finished_by_the_sensor(store, instance, monkeypatch):
    """Issue 50: the release's row committed, its queueing not begun (its process killed): the
    sensor's tick queues the traces, a bounded number of batches a tick, and hands them out."""
    from stash_pipeline.defs.scoring import sensors
    from stash_pipeline.store import releases, scoring_work

    monkeypatch.setenv("STASH_SCORING_BATCH", "25")
    monkeypatch.setattr(scoring_work, "RELEASE_QUEUE_BATCH", 2)
    monkeypatch.setattr(sensors, "RELEASE_QUEUE_BATCHES_PER_TICK", 2)
    store.import_traces([record(i) for i in range(7)])
    with store.transaction() as connection:
        releases.save_release(connection, Release("r1", "file:///r1.tar.gz", {}, {}))
    assert store.scoring_work(personal=False, limit=10) == []
    assert [len(batch) for batch in batches(tick(instance))] == [4]  # two batches of two
    # No run was made of the first tick's chunk: the next hands out all seven.
    assert [len(batch) for batch in batches(tick(instance, "1"))] == [7]
    assert len(store.scoring_work(personal=False, limit=10)) == 7
