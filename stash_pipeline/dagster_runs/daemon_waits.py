"""`--wait` beside a running daemon: the command leaves its request to the daemon's sensor, which
makes the run with the request's priority in the run queue with everything else, and waits for
that run, telling its wait as it changes (the pipeline to start its run, then the worker with the
runs ahead, then the run's progress). Without a daemon, or when it stops answering before it made
the run, the command runs the request in its own process (``in_process``).

A daemon answers while its sensor daemon, and the run queue's daemon where the instance queues
runs, have written a heartbeat within HEARTBEAT_TOLERANCE_S: Dagster writes each one every
``DEFAULT_HEARTBEAT_INTERVAL_SECONDS`` (30 s) from the daemon's loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import dagster as dg

from stash_pipeline.dagster_runs.console import RunFollower
from stash_pipeline.dagster_runs.in_process import run_sensor_requests
from stash_pipeline.dagster_runs.waits import WAIT_POLL_S, WaitTeller, run_of_key
from stash_pipeline.defs.worker_queue import NOT_STARTED

if TYPE_CHECKING:
    from stash_pipeline.store import Store

# Dagster's heartbeat interval (30 s) and as much again: a daemon whose newest heartbeat is older
# has stopped (a loaded machine delays a heartbeat by seconds, never by half a minute).
HEARTBEAT_TOLERANCE_S = 60.0
# How often score-pending's wait counts what is left of the queue (two indexed counts).
SCORING_POLL_S = 2.0
SENSOR_DAEMON = "SENSOR"
QUEUE_DAEMON = "QUEUED_RUN_COORDINATOR"


def daemon_answers(instance: dg.DagsterInstance, now: float | None = None) -> bool:
    """Whether a daemon works this instance's sensors (and its run queue, where it queues runs):
    each of them wrote a heartbeat within HEARTBEAT_TOLERANCE_S."""
    needed = [SENSOR_DAEMON]
    if QUEUE_DAEMON in instance.get_required_daemon_types():
        needed.append(QUEUE_DAEMON)
    beats = instance.get_daemon_heartbeats()
    now = time.time() if now is None else now
    return all(kind in beats and now - beats[kind].timestamp <= HEARTBEAT_TOLERANCE_S
               for kind in needed)


def sensor_stopped(instance: dg.DagsterInstance, sensor_name: str) -> bool:
    """Whether someone stopped the sensor (in the UI): a daemon then never ticks it."""
    from dagster._core.scheduler.instigation import InstigatorStatus, InstigatorType

    return any(state.instigator_name == sensor_name and state.status == InstigatorStatus.STOPPED
               for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR))


def requested_runs(instance: dg.DagsterInstance, defs: dg.Definitions, sensor_name: str,
                   run_keys: Sequence[str], *, on_run: Callable[[str], None] | None = None,
                   answers: Callable[[dg.DagsterInstance], bool] = daemon_answers
                   ) -> list[dg.DagsterRun]:
    """The finished runs of a `--wait` command's requests (the runs ``sensor_name`` makes for
    ``run_keys``): made by the daemon's sensor where one works the instance (``daemon_runs``),
    else, and for the keys the daemon made no run for before it stopped answering, executed
    here (``in_process.run_sensor_requests``, which waits for a key that has a run already)."""
    runs: list[dg.DagsterRun] = []
    if answers(instance) and not sensor_stopped(instance, sensor_name):
        runs, run_keys = daemon_runs(instance, sensor_name, run_keys, on_run=on_run,
                                     answers=answers)
        if not run_keys:
            return runs
    return runs + run_sensor_requests(instance, defs, sensor_name, run_keys=run_keys,
                                      once_per_run_key=True, on_run=on_run)


def daemon_runs(instance: dg.DagsterInstance, sensor_name: str, run_keys: Sequence[str], *,
                on_run: Callable[[str], None] | None = None, poll_s: float = WAIT_POLL_S,
                answers: Callable[[dg.DagsterInstance], bool] = daemon_answers
                ) -> tuple[list[dg.DagsterRun], list[str]]:
    """The runs the daemon's sensor makes for these run keys, each once it ended, and the keys
    it made no run for before it stopped answering (the caller runs those itself)."""
    runs, left = [], []
    for key in run_keys:
        run = _made_run(instance, sensor_name, key, on_run, poll_s, answers)
        if run is None:
            left.append(key)
            continue
        runs.append(followed(instance, run.run_id, on_run, poll_s, answers))
    return runs, left


def _made_run(instance: dg.DagsterInstance, sensor_name: str, key: str,
              say: Callable[[str], None] | None, poll_s: float,
              answers: Callable[[dg.DagsterInstance], bool]) -> dg.DagsterRun | None:
    """The run of ``key`` once the daemon made it; None if the daemon stopped answering first."""
    told = False
    while (run := run_of_key(instance, sensor_name, key)) is None:
        if not answers(instance):
            if say:
                say("the daemon stopped answering before it made the run: running it in this "
                    "process")
            return None
        if say and not told:
            say(NOT_STARTED.text())
            told = True
        time.sleep(poll_s)
    return run


def followed(instance: dg.DagsterInstance, run_id: str, say: Callable[[str], None] | None,
             poll_s: float = WAIT_POLL_S,
             answers: Callable[[dg.DagsterInstance], bool] = daemon_answers) -> dg.DagsterRun:
    """The run once it ended. Meanwhile ``say`` hears its wait for the worker whenever that
    changes, its progress as a run executed here shows it (console.RunFollower), and once that
    the daemon stopped answering while the run is still queued."""
    teller, follower = WaitTeller(instance, say), RunFollower(instance, run_id)
    told_gone = False
    try:
        while not (run := instance.get_run_by_id(run_id)).is_finished:
            teller.tell(run_id)
            follower.show_new()
            if (say and not told_gone and run.status == dg.DagsterRunStatus.QUEUED
                    and not answers(instance)):
                say(f"the daemon stopped answering: run {run_id} waits in its queue until it "
                    "is back")
                told_gone = True
            time.sleep(poll_s)
        follower.show_new()
    finally:
        follower.close()
    return run


def background_scored(instance: dg.DagsterInstance, store: Store, *,
                      on_run: Callable[[str], None] | None = None,
                      poll_s: float = SCORING_POLL_S,
                      answers: Callable[[dg.DagsterInstance], bool] = daemon_answers
                      ) -> int | None:
    """``evaluator score-pending --wait`` beside a daemon: the daemon's ``pending_scoring`` works
    the scoring queue in background chunks, in the run queue with everything else; this waits
    until the work queued when it was called is scored (``queue_worked``)."""
    mark = store.scoring_queue_mark()
    if mark is None:
        return 0
    return queue_worked(instance, store, lambda: store.count_queued_until(mark),
                        "the pipeline's background scoring: {left} of {total} queued trace "
                        "versions left", on_run=on_run, poll_s=poll_s, answers=answers)


def queue_worked(instance: dg.DagsterInstance, store: Store, left: Callable[[], int],
                 text: str, *, evaluator: str | None = None,
                 on_run: Callable[[str], None] | None = None, poll_s: float = SCORING_POLL_S,
                 answers: Callable[[dg.DagsterInstance], bool] = daemon_answers) -> int | None:
    """Wait while the daemon's background chunks work the scoring queue until ``left()`` (what
    the caller waits for: the work queued at its start, a model's Score again) is 0 or no chunk
    hands any of it out, telling "waiting for " + ``text`` (with ``{left}`` and ``{total}``)
    whenever it changes, or until a chunk (of ``evaluator``'s, when given) made since fails.
    The number of failed chunks; None if the daemon stopped answering first (the caller works
    the rest itself)."""
    from stash_pipeline.defs.scoring.sensors import BACKGROUND_TAG, IN_FLIGHT, in_flight

    newest = instance.get_run_records(limit=1)
    since = newest[0].storage_id if newest else 0
    chunks_then = {record.dagster_run.run_id for record in _chunks(instance, IN_FLIGHT)}
    total = remaining = left()
    said = None
    while remaining:
        failed = [record for record in _chunks(instance, [dg.DagsterRunStatus.FAILURE], 100)
                  if (record.dagster_run.run_id in chunks_then or record.storage_id > since)
                  and evaluator in (None, record.dagster_run.tags.get(BACKGROUND_TAG))]
        if failed:
            _say(on_run, f"background chunk {failed[0].dagster_run.run_id} failed")
            return len(failed)
        if not answers(instance):
            _say(on_run, "the daemon stopped answering: scoring the rest in this process")
            return None
        if remaining != said:
            _say(on_run, "waiting for " + text.format(left=remaining, total=total))
            said = remaining
        if not in_flight(instance).chunks and not _handed_out_next(store):
            break  # what is left, no evaluator scores (a model no longer kept current)
        time.sleep(poll_s)
        remaining = left()
    return 0


def _chunks(instance: dg.DagsterInstance, statuses: Sequence[dg.DagsterRunStatus],
            limit: int | None = None) -> list:
    """The records of the background chunks in these states, newest first."""
    from stash_pipeline.defs.scoring.jobs import trace_scoring_job
    from stash_pipeline.defs.scoring.sensors import BACKGROUND_TAG

    return [record for record in instance.get_run_records(
        filters=dg.RunsFilter(job_name=trace_scoring_job.name, statuses=list(statuses)),
        limit=limit) if BACKGROUND_TAG in record.dagster_run.tags]


def _handed_out_next(store: Store) -> bool:
    """Whether the scoring queue has work the pending_scoring sensor hands out."""
    from stash_pipeline.pipelines.trace_scoring import pending_batches

    return bool(pending_batches(store, batch_size=1, runs=1, skip=set()))


def _say(say: Callable[[str], None] | None, line: str) -> None:
    if say is not None:
        say(line)
