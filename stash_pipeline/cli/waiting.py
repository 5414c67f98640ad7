"""`--wait`: run what a pipeline sensor asks for now, in this process, on the local instance."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stash_pipeline.defs.personal.partitions import NamedModel

WAIT_HELP = ("run it now, in this process, on the local Dagster instance, and return when it "
             "ends (if a daemon started it already, wait for that run)")


def run_now(sensor: str, model: NamedModel | None = None, *,
            run_keys: list[str] | None = None) -> bool:
    """The run of one reward model's partition (``model``: a record with its id and name), or of
    these run keys; a run a daemon started for it is waited for. True when every run
    succeeded."""
    # Imported here: `--help` should not pay for Dagster.
    from stash_pipeline.defs.personal.partitions import model_partition_key
    from stash_pipeline.instance import definitions, get_instance, run_sensor_requests

    keys = None if model is None else [model_partition_key(model)]
    runs = run_sensor_requests(get_instance(), definitions(), sensor, partition_keys=keys,
                               run_keys=run_keys, once_per_run_key=True, on_run=say)
    return all(run.is_success for run in runs)


def say(line: str) -> None:
    """Progress goes to stderr: stdout's last line is the command's JSON."""
    print(line, file=sys.stderr)


def fail_abandoned_runs() -> None:
    """Fail the runs whose `--wait` command was killed, so their models read failed (with the
    reason) and can be retried, and their pool slots are free."""
    from stash_pipeline.instance import fail_abandoned_runs as fail, get_instance

    for run in fail(get_instance()):
        say(f"run {run.run_id} failed: the command that ran it was killed")
