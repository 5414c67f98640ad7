"""`--wait`: run what a pipeline sensor asks for now, in this process, on the local instance."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from stash_pipeline import dagster_runs
from stash_pipeline.cli import pipeline

if TYPE_CHECKING:
    from stash_pipeline.cli.pipeline import NamedModel

WAIT_HELP = ("run it now, in this process, on the local Dagster instance, and return when it "
             "ends (if a daemon started it already, wait for that run)")


def run_now(sensor: str, model: NamedModel | None = None, *,
            run_keys: list[str] | None = None) -> bool:
    """The run of one reward model's partition (``model``: a record with its id and name), or of
    these run keys; a run a daemon started for it is waited for. True when every run
    succeeded."""
    keys = None if model is None else [pipeline.model_partition_key(model)]
    runs = dagster_runs.run_sensor(sensor, partition_keys=keys, run_keys=run_keys,
                                   once_per_run_key=True, on_run=say)
    return all(run.is_success for run in runs)


def say(line: str) -> None:
    """Progress goes to stderr: stdout's last line is the command's JSON."""
    print(line, file=sys.stderr)


def fail_abandoned_runs() -> None:
    """Fail the runs whose `--wait` command was killed, so their models read failed (with the
    reason) and can be retried, and their pool slots are free."""
    for run in dagster_runs.fail_abandoned_runs():
        say(f"run {run.run_id} failed: the command that ran it was killed")
