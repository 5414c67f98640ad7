"""Runs whose `--wait` process died: the daemon's abandoned_runs sensor fails them, frees their
pool slots and fails their model (issue 22); a live or another host's process is left alone."""

from __future__ import annotations

import os
import socket
import subprocess

import dagster as dg

from stash_pipeline.defs.abandoned_runs import PROCESS_TAG, process_gone, this_process
from stash_pipeline.instance import definitions
from stash_pipeline.pipelines import personal_training as steps
from test_wait_beside_a_daemon import queued_model

POOL = "reward_worker"


def dead_process() -> str:
    """The PROCESS_TAG of a process that has ended."""
    child = subprocess.Popen(["true"])
    child.wait()
    return f"{socket.gethostname()}:{child.pid}:1"


def test_process_gone_tells_ended_reused_and_foreign_processes() -> None:
    assert not process_gone(this_process())
    assert process_gone(dead_process())
    host, pid, start = this_process().rsplit(":", 2)
    assert process_gone(f"{host}:{pid}:{int(start) + 1}")  # the pid now names a newer process
    assert not process_gone(f"another-host:{os.getpid() + 10**6}:1")  # cannot tell: left alone


def test_the_sensor_fails_a_run_whose_process_died_and_frees_its_slot(store, instance) -> None:
    model_id = queued_model(store)
    defs = definitions()
    runs = {}
    for name, tag in (("dead", dead_process()), ("alive", this_process())):
        runs[name] = instance.add_run(dg.DagsterRun(
            job_name="personal_reward_model_training", run_id=f"{name}-run",
            status=dg.DagsterRunStatus.STARTED,
            tags={PROCESS_TAG: tag, "dagster/partition": model_id, "stash/attempt": "1"}))
    steps.start(store, model_id, "dead-run")
    instance.event_log_storage.set_concurrency_slots(POOL, 1)
    claim = instance.event_log_storage.claim_concurrency_slot(POOL, "dead-run", "personal_pairs")
    assert claim.is_claimed

    sensor = defs.resolve_sensor_def("abandoned_runs")
    with dg.build_sensor_context(instance=instance, definitions=defs, resources=defs.resources,
                                 instance_ref=instance.get_ref()) as context:
        result = sensor.evaluate_tick(context)
    assert "failed 1 run" in result.skip_message

    assert instance.get_run_by_id("dead-run").status == dg.DagsterRunStatus.FAILURE
    assert instance.get_run_by_id("alive-run").status == dg.DagsterRunStatus.STARTED
    assert instance.event_log_storage.get_concurrency_info(POOL).active_slot_count == 0
    model = store.get_reward_model(model_id)
    assert model.status == "failed" and "ended before the run did" in model.error
