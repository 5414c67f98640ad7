"""`--wait` beside a running daemon: one run per run key, whoever starts it first."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import dagster as dg
from dagster._daemon.sensor import fetch_existing_runs

from stash_pipeline.dagster_runs.in_process import run_sensor_requests
from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.defs.sensor_cursors import RUN_KEY_TAG, SENSOR_NAME_TAG
from stash_pipeline_tests.support.pipeline_helpers import queued_model

SENSOR = "queued_reward_models"


def test_a_run_the_daemon_started_is_waited_for_not_run_again(store, instance):
    model_id = queued_model(store)
    daemon_run = instance.add_run(dg.DagsterRun(
        job_name="personal_reward_model_training", run_id="daemon-run",
        status=dg.DagsterRunStatus.STARTED,
        tags={RUN_KEY_TAG: f"{model_id}:1", SENSOR_NAME_TAG: SENSOR}))
    finisher = threading.Timer(0.5, lambda: instance.report_run_failed(daemon_run))
    finisher.start()
    said: list[str] = []
    started = time.monotonic()
    try:
        # The sensor does not ask for a key that has a run (its tick would make the daemon look
        # it up again): the command finds the run by the key it wants, as `--wait` commands do.
        runs = run_sensor_requests(instance, definitions(), SENSOR, once_per_run_key=True,
                                   run_keys=[f"{model_id}:1"], on_run=said.append)
    finally:
        finisher.join()
    assert [(r.run_id, r.status) for r in runs] == [("daemon-run", dg.DagsterRunStatus.FAILURE)]
    assert time.monotonic() - started >= 0.5  # it waited for the run to end
    assert said == [f"waiting for run daemon-run of {model_id}:1, started elsewhere (a daemon)"]
    # Nothing ran here: the model was never started by a second run.
    assert store.get_reward_model(model_id).status == "queued"
    assert len(instance.get_runs()) == 1


def test_a_run_started_here_is_one_the_daemon_skips(store, instance):
    model_id = queued_model(store)
    [run] = run_sensor_requests(instance, definitions(), SENSOR, once_per_run_key=True)
    assert run.tags[RUN_KEY_TAG] == f"{model_id}:1" and run.tags[SENSOR_NAME_TAG] == SENSOR
    # Dagster's own lookup of a tick's existing runs (a run without an origin matches by name).
    request = dg.RunRequest(run_key=f"{model_id}:1", partition_key=model_id)
    existing = fetch_existing_runs(instance, SimpleNamespace(name=SENSOR), [request])
    assert existing[f"{model_id}:1"].run_id == run.run_id
    assert store.get_reward_model(model_id).run_id == run.run_id


def test_without_once_per_run_key_a_run_claims_no_key(store, instance):
    """Sensors whose keys repeat from a fresh cursor (action scoring) must not block the daemon."""
    queued_model(store)
    [run] = run_sensor_requests(instance, definitions(), SENSOR)
    assert RUN_KEY_TAG not in run.tags


def test_a_models_run_the_daemon_started_is_found_by_its_partition(store, instance):
    """`rm create --wait` wants the model's partition, as the daemon's run has it."""
    from stash_pipeline.defs.personal.partitions import model_partition_key

    model_id = queued_model(store)
    key = model_partition_key(store.get_reward_model(model_id))
    instance.add_run(dg.DagsterRun(
        job_name="personal_reward_model_training", run_id="daemon-run",
        status=dg.DagsterRunStatus.SUCCESS,
        tags={RUN_KEY_TAG: f"{model_id}:1", SENSOR_NAME_TAG: SENSOR, "dagster/partition": key}))
    said: list[str] = []
    runs = run_sensor_requests(instance, definitions(), SENSOR, once_per_run_key=True,
                               partition_keys=[key], on_run=said.append)
    assert [r.run_id for r in runs] == ["daemon-run"]
    assert said == [f"waiting for run daemon-run of {key}, started elsewhere (a daemon)"]
    assert len(instance.get_runs()) == 1


def test_a_wait_runs_its_model_behind_more_than_a_ticks_runs(store, instance, monkeypatch):
    """A daemon's tick asks for RUNS_PER_TICK runs; a `--wait` command wants its own, wherever
    it is in the page."""
    from stash_pipeline.defs import sensor_cursors
    from stash_pipeline.defs.personal.partitions import model_partition_key

    monkeypatch.setattr(sensor_cursors, "RUNS_PER_TICK", 1)
    ids = [queued_model(store) for _ in range(3)]
    key = model_partition_key(store.get_reward_model(ids[-1]))
    runs = run_sensor_requests(instance, definitions(), SENSOR, once_per_run_key=True,
                               partition_keys=[key])
    assert [run.tags["dagster/partition"] for run in runs] == [key]
    assert [store.get_reward_model(i).status for i in ids] == ["queued", "queued", "failed"]
