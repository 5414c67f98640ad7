"""Score again in seconds (issue 54 item 3): both instance files make the run queue look every
second and the daemon's sensor loop run every second (run_queue.PromptRunCoordinator), with
threaded sensor ticks; the request sensors tick as often."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from dagster._daemon import sensor as sensor_daemon

from stash_pipeline.defs.sensor_cursors import REQUEST_INTERVAL_S
from stash_pipeline.run_queue import PromptRunCoordinator, use_sensor_loop

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def dagster_loop():
    before = sensor_daemon.MIN_INTERVAL_LOOP_TIME
    yield
    use_sensor_loop(before)


@pytest.mark.parametrize("path", [ROOT / "stash_pipeline" / "dagster_local.yaml",
                                  ROOT / "deploy" / "dagster.yaml"],
                         ids=["dagster_local.yaml", "deploy/dagster.yaml"])
def test_both_instance_files_answer_requests_within_a_loop_of_a_second(path, dagster_loop):
    import yaml

    config = yaml.safe_load(path.read_text())
    assert config["sensors"]["use_threads"] is True
    assert config["run_coordinator"]["config"]["sensor_loop_seconds"] == 1
    use_sensor_loop(5)  # Dagster's own
    overrides = {"run_coordinator": config["run_coordinator"]}
    with dg.instance_for_test(overrides=overrides) as instance:
        coordinator = instance.run_coordinator  # the daemon builds it as it starts
        assert isinstance(coordinator, PromptRunCoordinator)
        assert coordinator.dequeue_interval_seconds == 1
    assert sensor_daemon.MIN_INTERVAL_LOOP_TIME == 1.0


def test_the_score_again_sensors_tick_as_often_as_the_loop():
    from stash_pipeline.definitions import defs

    loaded = defs()
    for name in ("score_again_for_traces", "score_again_requests"):
        assert loaded.resolve_sensor_def(name).minimum_interval_seconds == REQUEST_INTERVAL_S == 1
