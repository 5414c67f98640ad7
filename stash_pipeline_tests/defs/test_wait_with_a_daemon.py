"""`--wait` with a daemon working the instance: the command leaves its request to the daemon's
sensor and waits for the run it makes, telling its wait; a daemon that stops answering before it
made the run leaves it to the command; without a daemon the command runs it itself.

The daemon here is its heartbeats (what the command looks at) and the runs a test makes as its
sensor would; test_worker_queue_daemon.py runs a real one."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
import pytest
from dagster._core.events.log import EventLogEntry
from dagster._daemon.types import DaemonHeartbeat

from stash_pipeline.dagster_runs import daemon_waits
from stash_pipeline.dagster_runs.daemon_waits import (
    HEARTBEAT_TOLERANCE_S,
    QUEUE_DAEMON,
    SENSOR_DAEMON,
    background_scored,
    daemon_answers,
    requested_runs,
)
from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.dagster_runs.waits import INVOCATION_TAG
from stash_pipeline.defs.sensor_cursors import RUN_KEY_TAG, SENSOR_NAME_TAG
from stash_pipeline.defs.worker_queue import priority_tags
from stash_pipeline.defs.worker_runs import REWARD_POOL
from stash_pipeline_tests.support.dagster_storage import queued_run_origin
from stash_pipeline_tests.support.pipeline_helpers import queued_model
from stash_pipeline_tests.support.waiting import wait_until

SENSOR = "queued_reward_models"
JOB = "personal_reward_model_training"
WAITING = "waiting for the pipeline to start its run"


def heartbeat(instance: dg.DagsterInstance, age_s: float = 0.0,
              kinds: tuple[str, ...] = (SENSOR_DAEMON, QUEUE_DAEMON)) -> None:
    """The daemon's heartbeats, written ``age_s`` ago."""
    for kind in kinds:
        instance.add_daemon_heartbeat(DaemonHeartbeat(time.time() - age_s, kind, "daemon", None))


@contextmanager
def beating(instance: dg.DagsterInstance) -> Iterator[None]:
    """A daemon's heartbeats, fresh while the block runs."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(0.2):
            heartbeat(instance)

    heartbeat(instance)
    thread = threading.Thread(target=beat)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    monkeypatch.setattr(daemon_waits, "WAIT_POLL_S", 0.05)
    monkeypatch.setattr(daemon_waits, "SCORING_POLL_S", 0.05)


def test_a_daemon_answers_while_its_sensor_and_queue_daemons_beat(instance):
    assert not daemon_answers(instance)
    heartbeat(instance, kinds=(SENSOR_DAEMON,))
    assert not daemon_answers(instance)  # this instance queues runs: the queue's daemon too
    heartbeat(instance)
    assert daemon_answers(instance)
    assert not daemon_answers(instance, now=time.time() + HEARTBEAT_TOLERANCE_S + 1)


def test_the_daemons_run_is_waited_for_with_its_wait_and_progress(store, instance, capsys):
    """Nothing runs here: the daemon's sensor makes the run (queued behind the worker's holder
    by its priority), and the command tells what it waits for as that changes."""
    model_id = queued_model(store)
    holder = instance.add_run(dg.DagsterRun(job_name="trace_scoring", run_id="holder",
                                            status=dg.DagsterRunStatus.STARTED))
    storage = instance.event_log_storage
    storage.set_concurrency_slots(REWARD_POOL, 1)
    assert storage.claim_concurrency_slot(REWARD_POOL, holder.run_id, "trace_scores").is_claimed
    said: list[str] = []

    def daemon() -> None:
        wait_until(lambda: WAITING in said, timeout_s=60, what="the command to wait")
        run = instance.add_run(dg.DagsterRun(
            job_name=JOB, run_id="daemon-run", status=dg.DagsterRunStatus.QUEUED,
            remote_job_origin=queued_run_origin(JOB),
            tags={RUN_KEY_TAG: f"{model_id}:1", SENSOR_NAME_TAG: SENSOR,
                  **priority_tags("request")}))
        try:
            wait_until(lambda: any(s.startswith("waiting for the worker") for s in said),
                       timeout_s=60, what="the command to tell the worker's wait")
            instance.handle_new_event(EventLogEntry(
                error_info=None, level=logging.WARNING, user_message="the base model is slow",
                run_id=run.run_id, timestamp=time.time(), dagster_event=None, job_name=JOB))
        finally:
            instance.report_run_failed(run)

    thread = threading.Thread(target=daemon)
    thread.start()
    try:
        with beating(instance):
            runs = requested_runs(instance, definitions(), SENSOR, [f"{model_id}:1"],
                                  on_run=said.append)
    finally:
        thread.join()
    assert [(r.run_id, r.status) for r in runs] == [("daemon-run", dg.DagsterRunStatus.FAILURE)]
    assert said == [WAITING, "waiting for the worker: 1 run ahead"]
    assert "  warning: the base model is slow" in capsys.readouterr().err
    assert store.get_reward_model(model_id).status == "queued"  # nothing ran here
    assert {r.run_id for r in instance.get_runs()} == {"holder", "daemon-run"}


def test_a_daemon_gone_before_it_made_the_run_leaves_it_to_the_command(store, instance):
    model_id = queued_model(store)
    replies = iter([True, True, True])  # then it stops answering

    def answers(_: dg.DagsterInstance) -> bool:
        return next(replies, False)

    said: list[str] = []
    [run] = requested_runs(instance, definitions(), SENSOR, [f"{model_id}:1"],
                           on_run=said.append, answers=answers)
    assert said[:2] == [WAITING, "the daemon stopped answering before it made the run: "
                                 "running it in this process"]
    assert said[2].startswith(f"running {JOB} for "), said
    assert INVOCATION_TAG in run.tags and run.tags[RUN_KEY_TAG] == f"{model_id}:1"
    assert store.get_reward_model(model_id).status == "failed"  # the base model is missing


def test_without_a_daemon_the_command_runs_it_here(store, instance):
    model_id = queued_model(store)
    said: list[str] = []
    [run] = requested_runs(instance, definitions(), SENSOR, [f"{model_id}:1"],
                           on_run=said.append)
    assert said[0].startswith(f"running {JOB} for "), said
    assert WAITING not in said and INVOCATION_TAG in run.tags
    assert run.tags["dagster/priority"] == "10"


def test_score_pending_leaves_to_the_daemon_and_stops_at_a_failed_chunk(store, instance,
                                                                        release):
    """The queue's work pending now, counted down; a background chunk that fails ends it."""
    from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records

    store.import_traces(agentprocessbench_records(3))
    said: list[str] = []

    def daemon() -> None:
        wait_until(lambda: bool(said), timeout_s=60, what="the command to wait")
        instance.report_run_failed(chunk_run(instance, "r1"))

    thread = threading.Thread(target=daemon)
    thread.start()
    try:
        with beating(instance):
            failed = background_scored(instance, store, on_run=said.append)
    finally:
        thread.join()
    assert failed == 1
    assert said == ["waiting for the pipeline's background scoring: 3 of 3 queued trace "
                    "versions left", "background chunk chunk failed"]


def test_score_pending_scores_here_once_the_daemon_is_gone(store, instance, release):
    from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records

    store.import_traces(agentprocessbench_records(2))
    replies = iter([True, True])  # then it stops answering
    said: list[str] = []
    assert background_scored(instance, store, on_run=said.append,
                             answers=lambda _: next(replies, False)) is None
    assert said[-1] == "the daemon stopped answering: scoring the rest in this process"
    assert not instance.get_runs()


def chunk_run(instance: dg.DagsterInstance, evaluator: str) -> dg.DagsterRun:
    """A background chunk's run as the daemon's sensor makes it (tag and run config: a wait
    that counts chunks in flight meanwhile reads both)."""
    from stash_pipeline.defs.scoring.sensors import BACKGROUND_TAG

    config = {"evaluator": evaluator, "actions": True, "trace_ids": [], "versions": []}
    return instance.add_run(dg.DagsterRun(
        job_name="trace_scoring", run_id="chunk", status=dg.DagsterRunStatus.STARTED,
        tags={BACKGROUND_TAG: evaluator},
        run_config={"ops": {"trace_scores": {"config": config}}}))


@pytest.mark.parametrize("failing", ["r1", "m1"])
def test_a_models_score_again_waits_for_its_own_chunks(store, instance, release, failing):
    """`rm score --wait` beside a daemon (``queue_worked`` for one evaluator): told what is left
    of the model's queue until none is; a failed chunk of another evaluator is not its failure,
    one of the model's own ends it."""
    from stash_pipeline.dagster_runs.daemon_waits import queue_worked
    from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records

    store.import_traces(agentprocessbench_records(3))  # work the release's chunks hand out
    run = chunk_run(instance, failing)
    calls: list[int] = []

    def left() -> int:
        calls.append(1)
        if len(calls) == 2:  # the chunk fails while the command waits
            instance.report_run_failed(run)
        return {1: 3, 2: 3, 3: 2}.get(len(calls), 0)

    said: list[str] = []
    with beating(instance):
        failed = queue_worked(instance, store, left, "{left} of {total} queued for m1",
                              evaluator="m1", on_run=said.append, poll_s=0.05)
    if failing == "m1":
        assert failed == 1
        assert said == ["waiting for 3 of 3 queued for m1", "background chunk chunk failed"]
    else:
        assert failed == 0
        assert said == ["waiting for 3 of 3 queued for m1", "waiting for 2 of 3 queued for m1"]
