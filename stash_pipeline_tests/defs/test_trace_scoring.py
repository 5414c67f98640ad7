"""Scores that stay current (issue 18): a personal model scores traces imported or changed after it
succeeded through the auto-scoring sensor; Score again for chosen traces with the release or a
personal model, actions on and off; a model's storing step never waits in the reward pool."""

from __future__ import annotations

import threading
from dataclasses import replace

import dagster as dg
import pytest
import sqlalchemy as sa

from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.core.traces import Message
from stash_pipeline.dagster_runs.in_process import run_sensor_requests
from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.defs.worker_runs import REWARD_POOL
from stash_pipeline.objects import object_store_from_env
from stash_pipeline.objects.keys import shared_evaluator_checkpoint_key
from stash_pipeline.pipelines import trace_scoring
from stash_pipeline.services import reward_models, scoring_requests
from stash_pipeline.store import Release, Store, schema
from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, bound

pytestmark = pytest.mark.slow


def _edited(trace):
    last = trace.messages[-1]
    return replace(trace, messages=trace.messages[:-1] + (
        Message(last.role, last.content + " (edited)", last.tool_calls, last.tool_call_id),))


def _rows(store: Store) -> dict:
    return {row.id: row for row in store.list_traces(owner="ana")}


def test_a_trace_imported_after_a_model_succeeded_is_scored_by_it(db, instance,
                                                                  pipeline_base_model):
    store, defs = db, definitions()
    records = agentprocessbench_records(9)
    store.import_traces(records[:6])
    model = reward_models.create(store, "ana", {
        "name": "m", "trace_ids": [r.trace.id for r in records[:6]],
        "base_model": str(pipeline_base_model)})
    [run] = run_sensor_requests(instance, defs, "queued_reward_models")
    assert store.get_reward_model(model.id).status == "succeeded", run
    assert run_sensor_requests(instance, defs, "pending_scoring") == []

    later, changed, same = records[6:], records[0].trace, records[1].trace
    store.import_traces([*later, replace(records[0], trace=_edited(changed)), records[1]])
    rows = _rows(store)
    waiting = {r.trace.id for r in later} | {changed.id}
    assert {i for i, row in rows.items() if row.personal_state == "pending"} == waiting
    assert all(rows[i].latest_score is None for i in waiting)  # never a stale score as current
    assert rows[same.id].personal_state == "scored" and rows[same.id].version == 1

    runs = run_sensor_requests(instance, defs, "pending_scoring")
    assert [r.status for r in runs] == [dg.DagsterRunStatus.SUCCESS]
    rows = _rows(store)
    assert {row.personal_state for row in rows.values()} == {"scored"}
    for trace_id in waiting:
        [score] = [s for s in store.scores_for(trace_id) if s.evaluator == model.id]
        assert score.trace_version == rows[trace_id].version
        assert rows[trace_id].latest_score == score.raw
        assert store.action_scores_for(trace_id, model.id)  # trained on action comparisons
    assert run_sensor_requests(instance, defs, "pending_scoring") == []


def _release(store: Store, checkpoint) -> Release:
    uri = object_store_from_env().put_file(shared_evaluator_checkpoint_key("r1"), checkpoint)
    return store.save_release(Release("r1", uri, {"passed": True},
                                      {"training_traces": {}, "benchmark_traces": {}}))


def _succeeded(store: Store, trace_ids: list[str], uri: str, metrics: dict) -> str:
    model = reward_models.create(store, "ana", {"name": "m", "trace_ids": trace_ids})
    store.mark_running(model.id)
    store.mark_succeeded(model.id, metrics=metrics, checkpoint_uri=uri)
    return model.id


def test_score_again_for_chosen_traces_with_the_release_or_a_model(db, instance,
                                                                   shared_checkpoint):
    from stash_pipeline.worker.scoring import RewardModel

    store, defs = db, definitions()
    records = agentprocessbench_records(3)
    store.import_traces(records)
    store.import_traces(agentprocessbench_records(4, owner="bo")[3:])
    t1, t2, t3 = (r.trace.id for r in records)
    with pytest.raises(NotFoundError, match="no shared evaluator release"):
        scoring_requests.request(store, "ana", [t1])
    release = _release(store, shared_checkpoint)

    def run_requests(*requests) -> None:
        """The sensor's runs of these requests (a tick here starts from no cursor)."""
        runs = run_sensor_requests(instance, defs, "score_again_for_traces", run_keys=[
            trace_scoring.request_run_key(r.run_ref) for r in requests])
        assert [r.status for r in runs] == [dg.DagsterRunStatus.SUCCESS] * len(requests)

    run_requests(scoring_requests.request(store, "ana", [t1, t2]))  # the release, whole traces
    expected = RewardModel(shared_checkpoint).score_traces(store.get_traces([t1, t2]))
    for trace_id, raw in zip((t1, t2), expected):
        [score] = store.scores_for(trace_id)
        assert (score.evaluator, score.raw) == ("r1", pytest.approx(raw, abs=1e-5))
        assert store.action_scores_for(trace_id) == []
    assert store.scores_for(t3) == []
    # Score again asked by ana: the release's trust report on her traces, saved and shown.
    [scored] = instance.fetch_materializations(dg.AssetKey("trace_scores"), limit=1).records
    shown = scored.asset_materialization.metadata
    assert "How far to trust r1" in shown["trust"].value
    with store.reading() as c:
        owners = c.execute(sa.select(schema.trust_reports.c.owner)).scalars().all()
    assert owners == ["ana"]
    run_requests(scoring_requests.request(store, "ana", [t1], actions=True))
    assert len(store.action_scores_for(t1, "r1")) == len(records[0].trace.actions())
    assert store.scored_version(t1, "r1") == 1

    model = _succeeded(store, [t1], release.checkpoint_uri, {"action_scoring_version": 1})
    run_requests(scoring_requests.request(store, "ana", [t2], model_id=model, actions=True),
                 scoring_requests.request(store, "ana", [t3], model_id=model))
    assert [s.evaluator for s in store.scores_for(t2)] == [model, "r1"]
    assert len(store.action_scores_for(t2, model)) == len(records[1].trace.actions())
    assert [s.evaluator for s in store.scores_for(t3)] == [model]
    assert store.action_scores_for(t3, model) == []
    assert _rows(store)[t3].latest_score == store.scores_for(t3)[0].raw

    older = _succeeded(store, [t1], release.checkpoint_uri, {"action_scoring_version": None})
    with pytest.raises(InputError, match="new training with action comparisons"):
        scoring_requests.request(store, "ana", [t1], model_id=older, actions=True)
    with pytest.raises(NotFoundError):
        scoring_requests.request(store, "ana", [agentprocessbench_records(1)[0].trace.id + "x"])
    with pytest.raises(NotFoundError):
        scoring_requests.request(store, "bo", [t1])


def test_one_scoring_path_stores_what_the_release_and_personal_models_each_stored(
        db, instance, shared_checkpoint):
    """The one background sensor and the one job work both queues: the release's chunks store
    action credit and scoring marks (no whole-trace score, as its auto-scoring always had), a
    kept-current personal model's chunks whole-trace scores with their action scores."""
    store, defs = db, definitions()
    records = agentprocessbench_records(4)
    store.import_traces(records[:1])
    release = _release(store, shared_checkpoint)
    model = _succeeded(store, [records[0].trace.id], release.checkpoint_uri,
                       {"action_scoring_version": 1})
    store.import_traces(records[1:])  # queued for the release and the kept-current model
    assert {w.evaluator for w in store.scoring_work(personal=True, limit=10)} == {model}

    runs = run_sensor_requests(instance, defs, "pending_scoring")
    assert {run.job_name for run in runs} == {"trace_scoring"}
    assert [r.status for r in runs] == [dg.DagsterRunStatus.SUCCESS] * 2
    assert [run.tags["stash/background_scoring"] for run in runs] == [model, "r1"]
    for record in records:
        trace_id, actions = record.trace.id, len(record.trace.actions())
        assert [s.evaluator for s in store.scores_for(trace_id)] == [model]
        assert len(store.action_scores_for(trace_id, model)) == actions
        assert len(store.action_scores_for(trace_id, "r1")) == actions
        assert store.scored_version(trace_id, "r1") == 1
    assert store.traces_pending_scoring("r1") == []
    assert store.scoring_work(personal=True, limit=10) == []
    assert store.scoring_work(personal=False, limit=10) == []


def test_the_storing_step_does_not_wait_behind_another_models_training(store, pipeline_base_model):
    """Another model's training holds the reward_worker slot (claimed here as its run would);
    the first model, whose worker is done, still becomes succeeded."""
    records = agentprocessbench_records(6)
    store.import_traces(records)
    model = reward_models.create(store, "ana", {"name": "m",
                                                "trace_ids": [r.trace.id for r in records],
                                                "base_model": str(pipeline_base_model)})
    defs = definitions()
    job = defs.resolve_job_def("personal_reward_model_training")
    overrides = {"concurrency": {"pools": {"default_limit": 1, "granularity": "op"}}}
    with dg.instance_for_test(overrides=overrides) as instance:
        instance.add_dynamic_partitions("personal_reward_model", [model.id])
        trained = job.execute_in_process(
            instance=instance, partition_key=model.id, raise_on_error=False,
            asset_selection=[dg.AssetKey(k) for k in
                             ("personal_pairs", "personal_split", "personal_checkpoint")])
        assert trained.success and store.get_reward_model(model.id).status == "running"
        storage = instance.event_log_storage
        storage.initialize_concurrency_limit_to_default(REWARD_POOL)
        claim = storage.claim_concurrency_slot(REWARD_POOL, "next-model-run", "personal_checkpoint")
        assert claim.is_claimed  # the next model is training
        done: list = []
        step = threading.Thread(target=lambda: done.append(job.execute_in_process(
            instance=instance, partition_key=model.id, raise_on_error=False,
            asset_selection=[dg.AssetKey("personal_scores")])), daemon=True)
        step.start()
        # With the pool it would wait for the slot, and this fails.
        step.join(timeout=bound(PROCESS_EXIT_S))
        try:
            assert done and done[0].success
            assert store.get_reward_model(model.id).status == "succeeded"
            assert instance.event_log_storage.get_concurrency_info(REWARD_POOL).claimed_slots
        finally:
            storage.free_concurrency_slots_for_run("next-model-run")
            step.join(timeout=bound(PROCESS_EXIT_S))
