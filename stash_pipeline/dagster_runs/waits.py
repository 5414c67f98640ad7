"""Waiting on runs: for one to end, and telling what it waits for (the worker, with the runs
ahead of it, ``defs.worker_queue``) whenever that changes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import dagster as dg

from stash_pipeline.dagster_runs.dead_runs import fail_abandoned_runs
from stash_pipeline.defs.sensor_cursors import RUN_KEY_TAG, SENSOR_NAME_TAG

WAIT_POLL_S = 1.0
# Names the run one call of in_process.run_sensor_requests executes, so its wait for the worker
# can be told.
INVOCATION_TAG = "stash/invocation"


def finished(instance: dg.DagsterInstance, run_id: str, poll_s: float = WAIT_POLL_S,
             on_wait: Callable[[str], None] | None = None) -> dg.DagsterRun:
    """The run once it ended; one whose process died (a killed `--wait`) is failed here.
    ``on_wait`` hears its wait for the worker whenever that changes."""
    teller = WaitTeller(instance, on_wait)
    while not (run := instance.get_run_by_id(run_id)).is_finished:
        if fail_abandoned_runs(instance, [run]):
            continue
        teller.tell(run_id)
        time.sleep(poll_s)
    return run


def run_of_key(instance: dg.DagsterInstance, sensor_name: str,
               run_key: str) -> dg.DagsterRun | None:
    """The newest run of ``sensor_name`` for ``run_key``, as the sensor daemon looks it up."""
    runs = instance.get_runs(filters=dg.RunsFilter(tags={RUN_KEY_TAG: run_key,
                                                         SENSOR_NAME_TAG: sensor_name}), limit=1)
    return runs[0] if runs else None


class WaitTeller:
    """Says "waiting for the worker: N runs ahead" (``defs.worker_queue``) each time N changes,
    from the first time a run is ahead (a run nothing is ahead of is not kept waiting)."""

    def __init__(self, instance: dg.DagsterInstance, say: Callable[[str], None] | None):
        self.instance, self.say, self.said = instance, say, None

    def tell(self, run_id: str) -> None:
        from stash_pipeline.defs.worker_queue import worker_wait

        if self.say is None:
            return
        wait = worker_wait(self.instance, run_id)
        if wait is None or wait.runs_ahead == self.said or (not wait.runs_ahead
                                                            and self.said is None):
            return
        self.say(wait.text())
        self.said = wait.runs_ahead


@contextmanager
def telling_wait(instance: dg.DagsterInstance, invocation: str,
                 say: Callable[[str], None] | None) -> Iterator[None]:
    """While the run tagged ``INVOCATION_TAG: invocation`` executes here, a thread tells its wait
    for the worker whenever it changes (the run's step waits for the reward_worker slot inside
    Dagster's executor)."""
    if say is None:
        yield
        return
    done = threading.Event()
    teller = WaitTeller(instance, say)

    def watch() -> None:
        while not done.wait(WAIT_POLL_S):
            try:
                runs = instance.get_runs(
                    filters=dg.RunsFilter(tags={INVOCATION_TAG: invocation}), limit=1)
                if runs:
                    teller.tell(runs[0].run_id)
            except Exception:  # noqa: BLE001 - telling the wait must never break the run
                continue

    watcher = threading.Thread(target=watch, name="wait-teller", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
