"""Partitions beyond 100,000 models (issue 43): a finished model's partition is deleted after the
retention, its model, metrics and materializations stay, and a retry brings the partition back.
A tick's work is bounded (issue 50): at most its page of models, their partitions deleted in one
statement whatever the number of models and partitions."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import dagster as dg
import sqlalchemy as sa

from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.defs.personal.partitions import model_partition_key, personal_reward_model
from stash_pipeline.defs.personal.retirement import retire_partitions
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


def _finished_models(store: Store, count: int, days: float = 10) -> list:
    records = agentprocessbench_records(1)
    store.import_traces(records)
    models = [reward_models.create(store, "ana", {"name": f"m{i}",
                                                  "trace_ids": [records[0].trace.id]})
              for i in range(count)]
    rm = schema.reward_models
    with store.transaction() as connection:
        connection.execute(rm.update().where(rm.c.id.in_([m.id for m in models])).values(
            status="failed", error="no pairs",
            finished_at=schema.utcnow() - timedelta(days=days)))
    return models


def _dagster_statements(instance: dg.DagsterInstance, call) -> Counter:
    """The statements ``call`` sends to the instance's own storage, by their first word and the
    dynamic partitions table (``DELETE dynamic_partitions``)."""
    counted: Counter = Counter()
    folder = str(instance.root_directory)

    def count(conn, cursor, statement, parameters, context, executemany) -> None:
        if folder in str(conn.engine.url):
            verb = statement.split(None, 1)[0].upper()
            counted[f"{verb} dynamic_partitions" if "dynamic_partitions" in statement
                    else verb] += 1

    sa.event.listen(sa.Engine, "before_cursor_execute", count)
    try:
        call()
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", count)
    return counted


def test_a_tick_deletes_its_page_of_partitions_in_one_statement(store, instance):
    models = _finished_models(store, 12)
    keys = [model_partition_key(m) for m in models]
    others = [f"recent--m{i}" for i in range(30)]  # partitions of models still in use
    instance.add_dynamic_partitions(personal_reward_model.name, keys + [models[0].id] + others)

    retired: list[str] = []

    def tick() -> None:
        retired.extend(retire_partitions(instance, store, limit=5))

    first = _dagster_statements(instance, tick)
    assert len(retired) == 5
    assert first["DELETE dynamic_partitions"] == 1, first
    assert sum(first.values()) == 1, first  # no lookup per key, no listing of partitions
    by_id = {m.id: model_partition_key(m) for m in models}
    left = set(instance.get_dynamic_partitions(personal_reward_model.name))
    bare = set() if models[0].id in retired else {models[0].id}  # a bare-id key goes too
    assert left == {by_id[i] for i in by_id if i not in retired} | bare | set(others)

    # Two more ticks: five, then the last two; the same one statement however many there are.
    assert _dagster_statements(instance, tick) == first
    assert len(retired) == 10
    assert sorted(retired + retire_partitions(instance, store, limit=5)) == sorted(by_id)
    assert set(instance.get_dynamic_partitions(personal_reward_model.name)) == set(others)
    assert sum(_dagster_statements(instance, lambda: retire_partitions(instance, store)
                                   ).values()) == 0  # nothing to retire: Dagster is not asked


def test_a_failed_delete_leaves_the_models_to_the_next_tick(store, instance, monkeypatch):
    """The store's stamp is the cursor: it commits only once the partitions are deleted."""
    from stash_pipeline.defs.personal import retirement

    models = _finished_models(store, 3)
    instance.add_dynamic_partitions(personal_reward_model.name,
                                    [model_partition_key(m) for m in models])

    def unavailable(*args, **kwargs):
        raise ConnectionError("Dagster's storage is away")

    monkeypatch.setattr(retirement, "delete_partitions", unavailable)
    try:
        retire_partitions(instance, store)
    except ConnectionError:
        pass
    else:
        raise AssertionError("the failed delete was not raised")
    assert all(store.get_reward_model(m.id).partition_retired_at is None for m in models)
    monkeypatch.undo()
    assert sorted(retire_partitions(instance, store)) == sorted(m.id for m in models)
    assert instance.get_dynamic_partitions(personal_reward_model.name) == []
