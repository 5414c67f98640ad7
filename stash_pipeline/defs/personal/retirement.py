"""Partitions beyond 100,000 models: a model's partition is deleted once no run needs it.

Dagster advises at most about 100,000 partitions in a dynamic partitions definition: every
partition key is a row the webserver and the daemon list. One partition per personal model would
cap a deployment at that many models in all, so a partition lives only while its model may still
run: while queued or running, and for STASH_PARTITION_RETENTION_DAYS (default 7) after it
finished, so a failed run can still be re-executed from its failure and recent lineage is one
click away in Dagster's UI. Then this sensor deletes the partition and stamps
``reward_models.partition_retired_at``; live partitions therefore scale with the models of the
last week, not with every model ever made.

Nothing the user looks at goes: the model, its status, metrics, error, checkpoint, pairs and
scores live in the store (the API, the CLI, the viewer), and the runs with their logs and the
asset materializations (with their metadata) stay in Dagster's run and event storage, found by the
run's ``stash/reward_model`` tag. ``rm retry`` queues a new attempt, whose partition the queued-
models sensor adds again. Score again and auto-scoring runs are not partitioned and need nothing.
"""

from __future__ import annotations

import os
from datetime import timedelta

import dagster as dg

from stash_pipeline.core.validation import positive_setting
from stash_pipeline.defs.personal.partitions import model_partition_key, personal_reward_model
from stash_pipeline.defs.resources import StoreResource
from stash_pipeline.store import Store
from stash_pipeline.store.schema import utcnow

RETENTION_ENV = "STASH_PARTITION_RETENTION_DAYS"
DEFAULT_RETENTION_DAYS = 7
INTERVAL_S = 60
RETIRED_PER_TICK = 200  # each is one delete in Dagster's storage; the rest wait a minute


def retention(environ: dict[str, str] | None = None) -> timedelta:
    """STASH_PARTITION_RETENTION_DAYS (default 7): how long a finished model keeps its
    partition."""
    environ = os.environ if environ is None else environ
    return timedelta(days=positive_setting(RETENTION_ENV, environ.get(RETENTION_ENV)
                                           or str(DEFAULT_RETENTION_DAYS)))


def retire_partitions(instance: dg.DagsterInstance, store: Store, *, limit: int = RETIRED_PER_TICK,
                      ) -> list[str]:
    """Delete the partitions of up to ``limit`` models finished longer than the retention ago
    and record it in the store; returns their model ids. Two store queries and one lookup and
    delete per model, whatever the number of models."""
    models = store.models_to_retire(utcnow() - retention(), limit)
    for model in models:
        for key in (model_partition_key(model), model.id):  # a bare id: keys before names
            if instance.has_dynamic_partition(personal_reward_model.name, key):
                instance.delete_dynamic_partition(personal_reward_model.name, key)
    store.mark_partitions_retired([m.id for m in models])
    return [m.id for m in models]


@dg.sensor(minimum_interval_seconds=INTERVAL_S, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Deletes the Dagster partition of each personal reward model finished "
                       "more than STASH_PARTITION_RETENTION_DAYS ago (Dagster advises at most "
                       "about 100,000 partitions); the model, its metrics, scores, runs and "
                       "materializations stay, and rm retry adds the partition again.")
def retired_model_partitions(context: dg.SensorEvaluationContext,
                             database: StoreResource) -> dg.SkipReason:
    retired = retire_partitions(context.instance, database.store)
    return dg.SkipReason(f"retired the partitions of {len(retired)} finished models" if retired
                         else "no finished model's partition to retire")
