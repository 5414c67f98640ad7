"""Score again requests named by UUIDs (issue 51, migration 0012) in Dagster: the request sensor's
runs carry a request's UUID in their key, tag and config, a request made before the migration
its integer id as its runs always did; a sensor cursor kept from before (an integer id) goes on
from where it was."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg

from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.defs.sensor_cursors import time_cursor
from stash_pipeline.pipelines.trace_scoring import SCORING_REQUEST_TAG
from stash_pipeline.store import Store, schema
from stash_pipeline_tests.defs.test_sensor_costs import _runs_as_the_daemon_creates_them

SENSOR = "score_again_for_traces"


def _tick(instance: dg.DagsterInstance, defs: dg.Definitions,
          cursor: str | None) -> dg.SensorResult:
    with dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(),
                                 definitions=defs, sensor_name=SENSOR,
                                 resources=defs.resources, cursor=cursor) as context:
        return defs.resolve_sensor_def(SENSOR).evaluate_tick(context)


def test_the_request_sensor_goes_on_from_a_cursor_kept_from_before_uuids(
        store: Store, instance: dg.DagsterInstance) -> None:
    long_ago = schema.utcnow() - timedelta(minutes=10)
    with store.transaction() as connection:
        connection.execute(schema.accounts.insert().values(id="ana"))
        for legacy_id in (1, 2, 3):  # as migration 0012 left them
            connection.execute(schema.scoring_requests.insert().values(
                legacy_id=legacy_id, owner="ana", evaluator="r1", traces={"t": 1},
                actions=False, created_at=long_ago + timedelta(seconds=legacy_id)))
    made = store.request_scoring(owner="ana", evaluator="r1", traces={"t": 1}, actions=False)
    old = {r.legacy_id: r for r in store.scoring_requests()}
    defs = definitions()

    result = _tick(instance, defs, "1")  # request 1 was settled before the migration
    assert [(r.run_key, r.tags[SCORING_REQUEST_TAG],
             r.run_config["ops"]["trace_scores"]["config"]["request"])
            for r in result.run_requests] == [
        ("scoring-request:2", "2", old[2].id), ("scoring-request:3", "3", old[3].id),
        (f"scoring-request:{made.id}", made.id, made.id)]
    # Past the settled requests, not the one made just now.
    assert result.cursor == time_cursor(old[3].created_at, old[3].id)
    _runs_as_the_daemon_creates_them(instance, defs, SENSOR, result)
    again = _tick(instance, defs, result.cursor)
    assert again.run_requests == [] and again.cursor == result.cursor
