"""Runs whose `--wait` process died: the daemon's abandoned_runs sensor fails them, frees their
pool slots, prunes their job directories to their logs and fails their model (issue 22); a live
or another host's process is left alone."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import uuid
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg

from stash_pipeline.compute.contract import job_directory
from stash_pipeline.compute.run import JOB_DIRS_TAG
from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.dagster_runs.run_state import request_state
from stash_pipeline.defs.abandoned_runs import PROCESS_TAG, process_gone, this_process
from stash_pipeline.defs.step_leases import holder_alive, lease_name
from stash_pipeline.pipelines import personal_training as steps
from stash_pipeline.services import reward_models
from stash_pipeline.services.scoring_requests import run_tags
from stash_pipeline.store.scoring_requests import ScoringRequest
from stash_pipeline_tests.support.pipeline_helpers import queued_model

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


def job_dir_with_outputs(folder: Path) -> Path:
    """A job directory as a killed run leaves it: inputs, weights and a log."""
    for name in ("worker.log", "attempt-logs/001-a.log", "train_pairs.jsonl", "settings.json",
                 "reward-model/model.safetensors", "checkpoint.tar.gz"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x")
    return folder


def test_the_sensor_fails_a_run_whose_process_died_and_frees_its_slot(store, instance,
                                                                      tmp_path) -> None:
    model_id = queued_model(store)
    defs = definitions()
    runs, job_dirs = {}, {}
    for name, tag in (("dead", dead_process()), ("alive", this_process())):
        job_dirs[name] = [job_dir_with_outputs(tmp_path / name / job) for job in ("a", "b")]
        runs[name] = instance.add_run(dg.DagsterRun(
            job_name="personal_reward_model_training", run_id=f"{name}-run",
            status=dg.DagsterRunStatus.STARTED,
            tags={PROCESS_TAG: tag, "dagster/partition": model_id, "stash/attempt": "1",
                  JOB_DIRS_TAG: json.dumps([str(d) for d in job_dirs[name]])}))
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
    # The dead run's job directories keep only their logs; the live run's are untouched.
    for job_dir in job_dirs["dead"]:
        assert sorted(str(p.relative_to(job_dir)) for p in job_dir.rglob("*")) == [
            "attempt-logs", "attempt-logs/001-a.log", "worker.log"]
    for job_dir in job_dirs["alive"]:
        assert (job_dir / "reward-model" / "model.safetensors").is_file()


def test_a_run_that_died_while_writing_its_inputs_leaves_no_inputs(store, instance, tmp_path
                                                                   ) -> None:
    """Before the worker starts, the attempt's directory is in no JOB_DIRS_TAG: recording the dead
    run prunes it all the same, to nothing (it had no log yet)."""
    model_id = queued_model(store)
    defs = definitions()
    instance.add_run(dg.DagsterRun(
        job_name="personal_reward_model_training", run_id="dead-run",
        status=dg.DagsterRunStatus.STARTED,
        tags={PROCESS_TAG: dead_process(), "dagster/partition": model_id, "stash/attempt": "1"}))
    steps.start(store, model_id, "dead-run")
    job_dir = job_directory(tmp_path / "jobs", model_id, steps.attempt_name(1))
    for name in ("settings.json", "train_pairs.jsonl"):
        job_dir.mkdir(parents=True, exist_ok=True)
        (job_dir / name).write_text("x")

    sensor = defs.resolve_sensor_def("abandoned_runs")
    with dg.build_sensor_context(instance=instance, definitions=defs, resources=defs.resources,
                                 instance_ref=instance.get_ref()) as context:
        assert "failed 1 run" in sensor.evaluate_tick(context).skip_message
    assert store.get_reward_model(model_id).status == "failed"
    assert list(job_dir.iterdir()) == []


def _tick(instance, defs) -> str:
    sensor = defs.resolve_sensor_def("abandoned_runs")
    with dg.build_sensor_context(instance=instance, definitions=defs, resources=defs.resources,
                                 instance_ref=instance.get_ref()) as context:
        return sensor.evaluate_tick(context).skip_message


def test_a_score_again_whose_command_died_is_failed_by_a_tick(store, instance) -> None:
    """Issue 50: a Score again whose `traces score --wait` was killed (its run made, or working)
    reads running or queued until the daemon's next tick fails it, with a one-line reason."""
    defs = definitions()
    requests = [ScoringRequest(str(uuid.uuid4()), None, "ana", "r1", {}, False,
                               datetime.now(timezone.utc)) for _ in range(2)]
    for scoring, status in zip(requests, (dg.DagsterRunStatus.STARTED,
                                          dg.DagsterRunStatus.NOT_STARTED)):
        instance.add_run(dg.DagsterRun(
            job_name="trace_scoring", run_id=f"score-{scoring.id}", status=status,
            tags={PROCESS_TAG: dead_process(), **run_tags(scoring)}))
        assert request_state(run_tags(scoring), instance)["status"] in ("queued", "running")
    assert "failed 2 run(s) whose command died" in _tick(instance, defs)
    for scoring in requests:
        state = request_state(run_tags(scoring), instance)
        assert state["status"] == "failed"
        assert "ended before the run did (it was killed); retry it" in state["error"]
        assert "\n" not in state["error"].strip()


def test_a_model_whose_run_ended_without_storing_it_is_failed_by_a_tick(store, instance) -> None:
    """Issue 50: a model left running or queued by a run that ended (or is gone) without storing
    it is failed by the daemon's tick with a one-line reason, so `rm retry` works; a model whose
    step a live process still works (its lease) is left to that process."""
    defs = definitions()
    ids = {}
    for name, run_status in (("ended", dg.DagsterRunStatus.FAILURE),
                             ("gone", None),
                             ("leased", dg.DagsterRunStatus.FAILURE),
                             ("working", dg.DagsterRunStatus.STARTED)):
        model_id = ids[name] = queued_model(store)
        run_id = f"{name}-run"
        if run_status is not None:
            instance.add_run(dg.DagsterRun(
                job_name="personal_reward_model_training", run_id=run_id, status=run_status,
                tags={"dagster/partition": model_id}))
        steps.start(store, model_id, run_id)
        steps.hold_worker(store, model_id, run_id)
    store.take_lease(lease_name("leased-run", "personal_checkpoint"), "leased-run",
                     this_process(), holder_alive)

    said = _tick(instance, defs)
    assert "failed 2 model(s) whose run ended without storing them" in said
    ended, gone = (store.get_reward_model(ids[n]) for n in ("ended", "gone"))
    assert ended.status == gone.status == "failed"
    assert ended.error == ("its run ended-run ended (failure) without storing the model; "
                           "rm retry queues it again")
    assert gone.error.startswith("its run gone-run no longer exists")
    assert store.get_reward_model(ids["leased"]).status == "running"
    assert store.get_reward_model(ids["working"]).status == "running"
    # Once the lease's holder is done with it, the next tick ends that model too.
    store.finish_lease(lease_name("leased-run", "personal_checkpoint"), this_process())
    assert "failed 1 model(s)" in _tick(instance, defs)
    assert store.get_reward_model(ids["leased"]).status == "failed"
    reward_models.retry(store, "ana", ids["ended"])  # rm retry queues it again
    assert store.get_reward_model(ids["ended"]).status == "queued"
