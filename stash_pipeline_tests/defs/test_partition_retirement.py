"""Partitions beyond 100,000 models (issue 43): a finished model's partition is deleted after the
retention, its model, metrics and materializations stay, and a retry brings the partition back."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg
import sqlalchemy as sa

from stash_pipeline.defs.personal.partitions import model_partition_key, personal_reward_model
from stash_pipeline.defs.personal.retirement import retire_partitions
from stash_pipeline.instance import definitions
from stash_pipeline.services import reward_models
from stash_pipeline.store import Store, schema
from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records


def _finished_days_ago(store: Store, model_id: str, days: float) -> None:
    rm = schema.reward_models
    with store.transaction() as connection:
        connection.execute(rm.update().where(rm.c.id == model_id).values(
            finished_at=schema.utcnow() - timedelta(days=days)))


def _tick(instance: dg.DagsterInstance, name: str) -> dg.SensorResult:
    defs = definitions()
    with dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(),
                                 definitions=defs, sensor_name=name,
                                 resources=defs.resources) as context:
        return defs.resolve_sensor_def(name).evaluate_tick(context)


def test_a_finished_models_partition_is_retired_and_comes_back_on_retry(store, instance):
    records = agentprocessbench_records(2)
    store.import_traces(records)
    ids = [r.trace.id for r in records]
    old, recent, failed, queued = (reward_models.create(store, "ana", {"name": name,
                                                                       "trace_ids": ids})
                                   for name in ("old one", "recent", "failed", "queued"))
    for model in (old, recent):
        store.mark_running(model.id)
        store.mark_succeeded(model.id, metrics={"eval_accuracy": 0.75},
                             checkpoint_uri="file:///m.tar.gz")
    store.mark_failed(failed.id, "no pairs")
    _finished_days_ago(store, old.id, 8)
    _finished_days_ago(store, failed.id, 30)
    keys = {m.id: model_partition_key(m) for m in (old, recent, failed, queued)}
    instance.add_dynamic_partitions(personal_reward_model.name, list(keys.values()))
    instance.report_runless_asset_event(dg.AssetMaterialization(
        "personal_checkpoint", partition=keys[old.id], metadata={"eval_accuracy": 0.75}))

    tick = _tick(instance, "retired_model_partitions")
    assert "retired the partitions of 2 finished models" in tick.skip_message
    assert set(instance.get_dynamic_partitions(personal_reward_model.name)) == {
        keys[recent.id], keys[queued.id]}
    # What the user looks at stays: the model, its metrics, and its materialization.
    kept = store.get_reward_model(old.id)
    assert kept.status == "succeeded" and kept.metrics == {"eval_accuracy": 0.75}
    assert kept.partition_retired_at is not None
    assert store.get_reward_model(recent.id).partition_retired_at is None
    [event] = instance.fetch_materializations(dg.AssetKey("personal_checkpoint"),
                                              limit=10).records
    assert event.partition_key == keys[old.id]
    assert event.asset_materialization.metadata["eval_accuracy"].value == 0.75
    assert retire_partitions(instance, store) == []  # each model is retired once

    # rm retry: a new attempt, whose partition the queued-models sensor adds again.
    store.requeue(failed.id)
    assert store.get_reward_model(failed.id).partition_retired_at is None
    tick = _tick(instance, "queued_reward_models")
    added = [key for request in tick.dynamic_partitions_requests
             for key in request.partition_keys]
    assert added == [keys[failed.id]]
    assert {r.partition_key for r in tick.run_requests} == {keys[failed.id], keys[queued.id]}


def test_retirement_reads_a_bounded_page(store, instance):
    records = agentprocessbench_records(1)
    store.import_traces(records)
    models = [reward_models.create(store, "ana", {"name": f"m{i}",
                                                  "trace_ids": [records[0].trace.id]})
              for i in range(5)]
    for model in models:
        store.mark_failed(model.id, "no pairs")
        _finished_days_ago(store, model.id, 10)
    first = retire_partitions(instance, store, limit=3)
    assert len(first) == 3
    assert sorted(first + retire_partitions(instance, store, limit=3)) == sorted(
        m.id for m in models)
    rm = schema.reward_models
    with store.reading() as connection:
        assert connection.scalar(sa.select(sa.func.count()).select_from(rm).where(
            rm.c.partition_retired_at.is_(None))) == 0
