"""Sensors that scale (issue 43): a tick of every store-reading sensor issues the same bounded
number of SQL statements whatever the number of users, models, traces and requests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import dagster as dg
import sqlalchemy as sa

from stash_pipeline.core.requests import parse_reward_model_request
from stash_pipeline.instance import definitions
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
