"""The shared evaluator retrains weekly (seed: candidates from the permitted feedback so far)."""

import dagster as dg

from stash_pipeline.defs.shared.jobs import shared_training_job
from stash_pipeline.defs.worker_queue import priority_tags

weekly_shared_evaluator = dg.ScheduleDefinition(
    name="weekly_shared_evaluator", job=shared_training_job, cron_schedule="0 3 * * 1",
    execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING,
    tags=priority_tags("shared_training"),
    description="Every Monday at 03:00 UTC: a new candidate from the opted-in feedback so far.",
)
