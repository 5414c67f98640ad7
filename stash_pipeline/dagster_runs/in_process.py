"""The pipeline's pending work run in this process: ``--wait`` commands evaluate a sensor once and
execute what it requests here, on the instance, as a daemon would launch it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

import dagster as dg

from stash_pipeline.dagster_runs.console import command_console
from stash_pipeline.dagster_runs.dead_runs import (
    dead_run_recorder,
    fail_abandoned_runs,
    record_failed_run,
)
from stash_pipeline.dagster_runs.waits import INVOCATION_TAG, finished, run_of_key, telling_wait
from stash_pipeline.defs.abandoned_runs import PROCESS_TAG, this_process
from stash_pipeline.defs.sensor_cursors import RUN_KEY_TAG, SENSOR_NAME_TAG, every_unstarted_request

# Runs executed here log their progress (the worker's lines among it) at INFO, not every DEBUG
# event: console.py shows what a person needs of it.
CONSOLE_INFO = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}


def run_sensor_requests(instance: dg.DagsterInstance, defs: dg.Definitions, sensor_name: str, *,
                        partition_keys: Sequence[str] | None = None,
                        run_keys: Sequence[str] | None = None,
                        once_per_run_key: bool = False,
                        on_run: Callable[[str], None] | None = None) -> list[dg.DagsterRun]:
    """One tick of ``sensor_name``, and each run it asks for executed here, in turn, with the
    request's run config and tags.

    ``partition_keys`` keeps only those partitions' runs, ``run_keys`` only the runs of those
    keys (ticks here start from no cursor and follow the sensor's cursor, a page at a time, until
    a page has them). With ``once_per_run_key`` (for sensors whose run
    keys name one piece of work), a key that already has a run on the instance, such as one a
    running daemon started, is waited for instead of run twice, and the runs started here carry
    the tags by which the daemon's sensor skips a key that has a run. Returns the finished runs.
    """
    fail_abandoned_runs(instance, record=dead_run_recorder(defs))
    sensor = defs.resolve_sensor_def(sensor_name)

    def wanted(request: dg.RunRequest) -> bool:
        return ((partition_keys is None or request.partition_key in partition_keys)
                and (run_keys is None or request.run_key in run_keys))

    cursor = None
    while True:  # a tick reads one page: follow the cursor to the page with the wanted runs
        with dg.build_sensor_context(instance=instance, definitions=defs,
                                     instance_ref=instance.get_ref(), sensor_name=sensor_name,
                                     resources=defs.resources, cursor=cursor) as context, \
                every_unstarted_request():  # the one it wants may come after many others
            data = sensor.evaluate_tick(context)
        for request in data.dynamic_partitions_requests or ():
            instance.add_dynamic_partitions(request.partitions_def_name,
                                            list(request.partition_keys))
        if (partition_keys is None and run_keys is None) or data.cursor in (None, cursor) \
                or any(wanted(request) for request in data.run_requests or ()):
            break
        cursor = data.cursor
    runs = []
    for request in data.run_requests or ():
        if not wanted(request):
            continue
        tags = {**dict(request.tags), PROCESS_TAG: this_process(),
                INVOCATION_TAG: uuid.uuid4().hex}
        if once_per_run_key and request.run_key:
            existing = run_of_key(instance, sensor_name, request.run_key)
            if existing is not None:
                if on_run:
                    on_run(f"waiting for run {existing.run_id} of {request.run_key}, "
                           "started elsewhere (a daemon)")
                runs.append(finished(instance, existing.run_id, on_wait=on_run))
                continue
            tags.update({RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: sensor_name})
        job = defs.resolve_job_def(request.job_name or sensor.job_name)
        if on_run:
            on_run(f"running {job.name} for {request.partition_key or request.run_key}")
        with command_console(), telling_wait(instance, tags[INVOCATION_TAG], on_run):
            result = job.execute_in_process(
                instance=instance, partition_key=request.partition_key, tags=tags,
                raise_on_error=False, run_config={**dict(request.run_config or {}),
                                                  **CONSOLE_INFO})
        runs.append(result.dagster_run)
        if not result.success:
            record_failed_run(defs, result)
    if once_per_run_key:  # a sensor asks only for keys without a run (sensor_cursors.unstarted)
        asked = [r for r in data.run_requests or () if wanted(r)]
        for key, existing in _started_elsewhere(instance, sensor_name, asked, partition_keys,
                                                run_keys):
            if on_run:
                on_run(f"waiting for run {existing.run_id} of {key}, started elsewhere "
                       "(a daemon)")
            runs.append(finished(instance, existing.run_id, on_wait=on_run))
    return runs


def run_sensor_until_done(instance: dg.DagsterInstance, defs: dg.Definitions, sensor_name: str,
                          *, on_run: Callable[[str], None] | None = None) -> int:
    """``run_sensor_requests`` tick after tick (each hands out at most the sensor's limit), on
    one load of the definitions, until a tick requests nothing or a run fails; the number of
    failed runs."""
    failed = 0
    while True:
        runs = run_sensor_requests(instance, defs, sensor_name, on_run=on_run)
        failed += sum(not run.is_success for run in runs)
        if not runs or failed:
            return failed


def _started_elsewhere(instance: dg.DagsterInstance, sensor_name: str,
                       asked: Sequence[dg.RunRequest], partition_keys: Sequence[str] | None,
                       run_keys: Sequence[str] | None) -> list[tuple[str, dg.DagsterRun]]:
    """Each wanted partition or run key the tick did not ask for because it has a run of
    ``sensor_name`` (one a daemon started), with that run (the newest)."""
    found = []
    for tag, keys, of in (("dagster/partition", partition_keys, lambda r: r.partition_key),
                          (RUN_KEY_TAG, run_keys, lambda r: r.run_key)):
        for key in sorted(set(keys or ()) - {of(request) for request in asked}):
            found += [(key, run) for run in instance.get_runs(filters=dg.RunsFilter(
                tags={tag: key, SENSOR_NAME_TAG: sensor_name}), limit=1)]
    return found
