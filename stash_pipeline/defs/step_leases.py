"""A worker step starts at most once: the process that works a step of a run holds the step's
lease in the store (store.leases) and renews it while it works. A second start of the same step
(the run launched twice, a run worker restarted beside the first) finds the lease held by a live
process, or finished, and ends without work and without touching the model
(``SecondStart``: ``failing_step`` passes it on unrecorded); the run's model follows the process
that holds the lease (``runs.record_dead_run`` leaves it to that process)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from stash_pipeline.core.errors import StashError
from stash_pipeline.defs.abandoned_runs import process_gone, this_process
from stash_pipeline.store import Store, schema
from stash_pipeline.store.leases import Lease

# A holder renews its lease this often; a lease of another host's process not renewed for
# STALE_AFTER is taken over (a process of this host is asked directly whether it lives).
RENEW_S = 20.0
STALE_AFTER = timedelta(seconds=120)
# How often a step waiting for a worker slot looks again.
WORKER_POLL_S = 1.0


class SecondStart(StashError):
    """This start of a step found it worked by another process, or done: it does nothing."""


def lease_name(run_id: str, step_key: str) -> str:
    return f"step:{run_id}:{step_key}"


def holder_alive(lease: Lease) -> bool:
    """Whether the lease's holder still works: its process, on this host; another host's while
    it renews the lease."""
    host = lease.holder.rsplit(":", 2)[0]
    if host == this_process().rsplit(":", 2)[0]:
        return not process_gone(lease.holder)
    return schema.utcnow() - lease.renewed_at < STALE_AFTER


def held_by_a_live_process(store: Store, run_id: str) -> Lease | None:
    """A lease of this run's steps that a live process holds (works now), if any: the run's
    model is that process's to change."""
    return next((lease for lease in store.unfinished_leases(run_id) if holder_alive(lease)),
                None)


def worker_slot_name(slot: int) -> str:
    return f"worker:{slot}"


@contextmanager
def step_lease(store: Store, run_id: str, step_key: str, *, worker_slots: int = 0,
               on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """The block runs only in the one process that holds the step's lease; SecondStart in any
    other start of the step. A step that drives the worker (``worker_slots``: the reward_worker
    pool's limit) holds one of that many worker slots too, waiting (``on_wait`` hears it once)
    while live processes hold them all: the pool's limit holds even for a process Dagster lost
    track of (a run it failed while its step went on). The leases are renewed while the block
    runs and finished after it, whether it succeeded or failed (a failed step starts again only
    as a new run; a finished worker slot is free)."""
    name, me = lease_name(run_id, step_key), this_process()
    other = store.take_lease(name, run_id, me, holder_alive)
    if other is not None:
        state = ("already ran" if other.finished_at is not None
                 else f"is running in process {other.holder}")
        raise SecondStart(f"step {step_key} of run {run_id} {state}: this second start does "
                          "nothing")
    held = [name]
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(RENEW_S):
            for lease in list(held):
                store.renew_lease(lease, me)

    renewer = threading.Thread(target=renew, name=f"lease {name}", daemon=True)
    renewer.start()
    try:
        if worker_slots:
            held.append(_worker_slot(store, run_id, me, worker_slots, on_wait))
        yield
    finally:
        stop.set()
        renewer.join()
        for lease in held:
            store.finish_lease(lease, me)


def _worker_slot(store: Store, run_id: str, me: str, slots: int,
                 on_wait: Callable[[str], None] | None) -> str:
    """The name of a worker slot taken, once one is free (polled every WORKER_POLL_S)."""
    told = False
    while True:
        holders = []
        for slot in range(slots):
            other = store.take_lease(worker_slot_name(slot), run_id, me, holder_alive,
                                     reuse_finished=True)
            if other is None:
                return worker_slot_name(slot)
            holders.append(f"run {other.run_id} (process {other.holder})")
        if not told and on_wait is not None:
            on_wait(f"waiting for the worker, held by {', '.join(holders)}")
            told = True
        time.sleep(WORKER_POLL_S)
