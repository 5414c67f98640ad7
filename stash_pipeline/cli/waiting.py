"""`--wait`: the run of a request, made by the running daemon (in the run queue, by priority,
with everything else) or, without one, executed in this process; its wait and progress told."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from stash_pipeline import dagster_runs
from stash_pipeline.cli import pipeline

if TYPE_CHECKING:
    from stash_pipeline.store import RewardModelRecord

WAIT_HELP = ("return when its run ends, telling its wait and progress: a running daemon "
             "(stash-pipeline dev, a deployment's) makes the run, in the queue by priority with "
             "everything else; without one it runs now in this process")


def run_now(sensor: str, model: RewardModelRecord | None = None, *,
            run_keys: list[str] | None = None) -> bool:
    """The training run of a queued reward model (``model``: its record), or the runs of these
    run keys (dagster_runs.requested_runs). True when every run succeeded."""
    keys = list(run_keys or ()) + ([] if model is None else [pipeline.model_run_key(model)])
    runs = dagster_runs.requested_runs(sensor, keys, on_run=say)
    return all(run.is_success for run in runs)


@contextmanager
def scoring_worker() -> Iterator[None]:
    """While a command scores chunks in this process (no daemon works the queue): one resident
    worker takes their jobs, torch loaded once rather than once a chunk
    (``compute.resident.resident_worker_while``)."""
    from stash_pipeline.compute.resident import resident_worker_while

    with resident_worker_while():
        yield


def say(line: str) -> None:
    """Progress goes to stderr: stdout's last line is the command's JSON."""
    print(line, file=sys.stderr)


def fail_abandoned_runs() -> None:
    """Fail the runs whose `--wait` command was killed, so their models read failed (with the
    reason) and can be retried, and their pool slots are free."""
    for run in dagster_runs.fail_abandoned_runs():
        say(f"run {run.run_id} failed: the command that ran it was killed")
