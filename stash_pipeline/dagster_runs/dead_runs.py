"""Runs whose process died (a killed ``--wait``) and runs that failed here, recorded as the
run-failure sensor records them in a deployment (``defs.runs``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg

from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.defs import abandoned_runs


def fail_abandoned_runs(instance: dg.DagsterInstance,
                        runs: Sequence[dg.DagsterRun] | None = None,
                        record: Callable[[dg.DagsterRun, str], Any] | None = None
                        ) -> list[dg.DagsterRun]:
    """``defs.abandoned_runs.fail_abandoned_runs``, recording each failed run as the run-failure
    sensor would unless ``record`` says otherwise."""
    return abandoned_runs.fail_abandoned_runs(instance, runs,
                                              record or dead_run_recorder(definitions()))


def dead_run_recorder(defs: dg.Definitions) -> Callable[[dg.DagsterRun, str], Any]:
    """What the run-failure sensor does in a deployment, for a run that failed here."""
    from stash_pipeline.defs import runs

    return runs.dead_run_recorder(defs.resources)


def record_failed_run(defs: dg.Definitions, result: Any) -> None:
    """What the run-failure sensor does in a deployment, for a run executed here
    (``result``: its ``execute_in_process`` result)."""
    failure = next((e for e in result.all_events if e.is_step_failure or e.is_run_failure), None)
    message = failure.message if failure is not None else "the run failed"
    dead_run_recorder(defs)(result.dagster_run, message)
