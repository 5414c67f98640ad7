"""How far a run got, read back from its event log."""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from stash_pipeline.compute.worker_log import JobProgress, job_progress
from stash_pipeline.dagster_runs.instance import get_instance


@dataclass(frozen=True)
class RunProgress:
    """How far a run got: the Dagster step it started last (``personal_pairs`` ...
    ``personal_scores``) and its worker's progress lines read back (phase, training step, loss,
    pairs/s, the newest line)."""
    dagster_step: str | None
    worker: JobProgress


def run_progress(run_id: str, *, look_back: int = 500) -> RunProgress:
    """The run's progress, from its last ``look_back`` log entries: the worker's progress lines
    are its Pipes log messages, the steps Dagster's STEP_START events."""
    records = get_instance().get_records_for_run(run_id, limit=look_back,
                                                 ascending=False).records
    lines, dagster_step = [], None
    for record in records:
        event = record.event_log_entry.dagster_event
        if event is None:
            lines.append(record.event_log_entry.user_message or "")
        elif dagster_step is None and event.event_type == dg.DagsterEventType.STEP_START:
            dagster_step = event.step_key
    return RunProgress(dagster_step, job_progress(lines))
