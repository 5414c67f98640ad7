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
from collections.abc import Sequence
from datetime import timedelta

import dagster as dg
from dagster._core.storage.event_log.schema import DynamicPartitionsTable
from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage

from stash_pipeline.core.validation import positive_setting
from stash_pipeline.defs.personal.partitions import model_partition_key, personal_reward_model
from stash_pipeline.defs.resources import StoreResource
from stash_pipeline.store import Store
from stash_pipeline.store.schema import utcnow

RETENTION_ENV = "STASH_PARTITION_RETENTION_DAYS"
DEFAULT_RETENTION_DAYS = 7
INTERVAL_S = 60
# Models whose partitions one tick deletes, in one statement; a backlog (the sensor's first tick
# on a deployment with many old models) waits for the next minute's ticks.
RETIRED_PER_TICK = 200


def retention(environ: dict[str, str] | None = None) -> timedelta:
    """STASH_PARTITION_RETENTION_DAYS (default 7): how long a finished model keeps its
    partition."""
    environ = os.environ if environ is None else environ
    return timedelta(days=positive_setting(RETENTION_ENV, environ.get(RETENTION_ENV)
                                           or str(DEFAULT_RETENTION_DAYS)))


def retire_partitions(instance: dg.DagsterInstance, store: Store, *, limit: int = RETIRED_PER_TICK,
                      ) -> list[str]:
    """Delete the partitions of up to ``limit`` models finished longer than the retention ago
    and record it in the store; returns their model ids. Two store statements and one delete in
    Dagster's storage, whatever the number of models and partitions. The store's stamp is the
    cursor: it commits only after the delete, so a failed delete is tried again next tick."""
    with store.retiring_partitions(utcnow() - retention(), limit) as models:
        delete_partitions(instance, personal_reward_model.name,
                          [key for model in models
                           for key in (model_partition_key(model), model.id)])  # bare: old keys
    return [model.id for model in models]


def delete_partitions(instance: dg.DagsterInstance, partitions_def_name: str,
                      keys: Sequence[str]) -> None:
    """Delete whichever of ``keys`` exist in a dynamic partitions definition.

    ``instance.delete_dynamic_partition`` deletes one key per call, and on PostgreSQL each call
    opens two connections (dagster-postgres holds none open) to check its table and delete: 200
    keys took most of a minute. Dagster's SQL storages (PostgreSQL, SQLite) keep the keys in one
    table, indexed by (definition, key): one DELETE removes them all. Another storage gets the
    per-key calls."""
    if not keys:
        return
    storage = instance.event_log_storage
    if not isinstance(storage, SqlEventLogStorage):
        for key in keys:
            instance.delete_dynamic_partition(partitions_def_name, key)
        return
    table = DynamicPartitionsTable
    with storage.index_connection() as connection:
        connection.execute(table.delete().where(
            table.c.partitions_def_name == partitions_def_name, table.c.partition.in_(keys)))


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
