"""Sensors that scale (issue 43): a tick of every store-reading sensor issues the same bounded
number of SQL statements whatever the number of users, models, traces and requests, and a request
sensor's tick asks for a bounded number of runs (issue 50)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import dagster as dg
import pytest
import sqlalchemy as sa

from stash_pipeline.core.requests import parse_reward_model_request
from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.defs import sensor_cursors
from stash_pipeline.defs.sensor_cursors import RUN_KEY_TAG, SENSOR_NAME_TAG
from stash_pipeline.store import Release, Store, TraceScore
from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records

SENSORS = ("queued_reward_models", "score_again_requests", "score_again_for_traces",
           "pending_scoring", "shared_training_requests",
           "retired_model_partitions")


@contextmanager
def statements_on(url: str) -> Iterator[Counter]:
    """Counts the statements sent to the store's database (not Dagster's own storage)."""
    counted: Counter = Counter()

    def count(conn, cursor, statement, parameters, context, executemany) -> None:
        if conn.engine.url.render_as_string(hide_password=False) == url:
            counted["statements"] += 1

    sa.event.listen(sa.Engine, "before_cursor_execute", count)
    try:
        yield counted
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", count)


def _users(store: Store, first: int, count: int) -> None:
    """``count`` users, each with three traces, a succeeded model that has scored one (so two
    wait for it), a Score again request, a queued model and a Score again for chosen traces."""
    for n in range(first, first + count):
        owner = f"user{n}"
        ids = [f"{owner}-t{i}" for i in range(3)]
        [record] = agentprocessbench_records(1)
        store.import_traces([replace(record, feedback=(), trace=replace(record.trace, id=t,
                                                                        owner=owner))
                             for t in ids])
        model = store.create_reward_model(owner, parse_reward_model_request(
            {"name": "m", "trace_ids": ids}))
        store.mark_running(model.id)
        store.mark_succeeded(model.id, metrics={}, checkpoint_uri="file:///m.tar.gz",
                             scores=[TraceScore(ids[0], 1, model.id, 1.0)])
        store.request_score_again(model.id)
        store.create_reward_model(owner, parse_reward_model_request(
            {"name": "queued", "trace_ids": ids}))
        store.request_scoring(owner=owner, evaluator=model.id, traces={ids[1]: 1},
                              actions=False)
        store.request_shared_training()


def _tick_costs(store: Store, instance: dg.DagsterInstance) -> dict[str, int]:
    defs = definitions()
    costs = {}
    for name in SENSORS:
        with dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(),
                                     definitions=defs, sensor_name=name,
                                     resources=defs.resources) as context:
            sensor = defs.resolve_sensor_def(name)
            sensor.evaluate_tick(context)  # the resources' store is made and migrated
            with statements_on(store.url) as counted:
                sensor.evaluate_tick(context)
        costs[name] = counted["statements"]
    return costs


def test_a_ticks_statements_do_not_grow_with_users_and_models(store, instance,
                                                              monkeypatch) -> None:
    monkeypatch.setenv("STASH_SCORING_BATCH", "2")
    store.save_release(Release("r1", "file:///r1.tar.gz", {"passed": True},
                               {"training_traces": {}}))
    _users(store, 0, 2)
    few = _tick_costs(store, instance)
    _users(store, 2, 25)
    many = _tick_costs(store, instance)
    assert many == few, (few, many)
    # The background scoring sensor reads both queues (the personal models' and the release's),
    # the work of two sensors once.
    bounds = {name: 8 if name == "pending_scoring" else 4 for name in SENSORS}
    assert set(few) == set(SENSORS) and all(0 < n <= bounds[k] for k, n in few.items()), few


REQUEST_SENSORS = ("queued_reward_models", "score_again_requests", "score_again_for_traces",
                   "shared_training_requests")


def _runs_as_the_daemon_creates_them(instance: dg.DagsterInstance, defs: dg.Definitions,
                                     name: str, result: dg.SensorResult) -> None:
    """The tick's partitions and runs, with the tags by which the daemon finds a key's run."""
    for request in result.dynamic_partitions_requests or ():
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    job = defs.resolve_job_def(defs.resolve_sensor_def(name).job_name)
    for request in result.run_requests:
        tags = {**request.tags, RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: name}
        if request.partition_key:
            tags["dagster/partition"] = request.partition_key
        instance.create_run_for_job(job, run_config=request.run_config, tags=tags)


@pytest.mark.parametrize("name", REQUEST_SENSORS)
def test_a_tick_asks_for_a_bounded_number_of_runs_and_never_twice(store, instance, monkeypatch,
                                                                   name) -> None:
    """The daemon creates each run a tick asks for, one after another: a tick asks for
    RUNS_PER_TICK at most, and never again for a request whose run exists, even while the cursor
    cannot move past it yet (requests younger than SETTLE_S)."""
    monkeypatch.setattr(sensor_cursors, "RUNS_PER_TICK", 3)
    store.save_release(Release("r1", "file:///r1.tar.gz", {"passed": True},
                               {"training_traces": {}}))
    _users(store, 0, 7)
    defs = definitions()
    cursor, asked = None, []
    for _ in range(4):
        with dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(),
                                     definitions=defs, sensor_name=name,
                                     resources=defs.resources, cursor=cursor) as context:
            result = defs.resolve_sensor_def(name).evaluate_tick(context)
        keys = [request.run_key for request in result.run_requests]
        assert len(keys) <= 3, keys
        asked.append(keys)
        _runs_as_the_daemon_creates_them(instance, defs, name, result)
        cursor = result.cursor
    assert [len(keys) for keys in asked] == [3, 3, 1, 0], asked
    assert len({key for keys in asked for key in keys}) == 7
    assert cursor is None  # young requests: the cursor waits, the runs' keys skip them
