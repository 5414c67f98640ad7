"""The Dagster instance the CLI and the API talk to, and the pipeline's pending work run in-process.

``DAGSTER_HOME`` when set (a deployment's instance), else ``$STASH_HOME/dagster`` with the packaged
``dagster_local.yaml``: the same instance ``stash-pipeline dev`` opens in the UI. ``--wait``
commands evaluate the pipeline's sensors once and run what they request in this process, on that
instance.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from stash_pipeline.compute.worker_log import JobProgress, job_progress
from stash_pipeline.core.home import absolute, stash_home
from stash_pipeline.defs import abandoned_runs
from stash_pipeline.defs.abandoned_runs import PROCESS_TAG, this_process
from stash_pipeline.defs.sensor_cursors import RUN_KEY_TAG, SENSOR_NAME_TAG, every_unstarted_request
from stash_pipeline.run_console import command_console
from stash_pipeline.store.migration_scripts import share_revision_maps

LOCAL_CONFIG = Path(__file__).with_name("dagster_local.yaml")
CREATED = ".stash-created"  # in the instance folder, once its storage exists
# Runs executed here log their progress (the worker's lines among it) at INFO, not every DEBUG
# event: run_console shows what a person needs of it.
CONSOLE_INFO = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
# Names the run one call of run_sensor_requests executes, so its wait for the worker can be told.
INVOCATION_TAG = "stash/invocation"
WAIT_POLL_S = 1.0
def dagster_home(environ: Mapping[str, str] | None = None) -> Path:
    """The instance folder; the embedded one is created with its dagster.yaml on first use."""
    environ = os.environ if environ is None else environ
    if environ.get("DAGSTER_HOME"):
        return absolute(environ["DAGSTER_HOME"])
    home = stash_home(environ) / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").is_file():
        shutil.copyfile(LOCAL_CONFIG, home / "dagster.yaml")
    return home


# The process's instance and its folder (get_instance).
_open_instance: tuple[Path, dg.DagsterInstance] | None = None
_open_instance_lock = threading.Lock()


def get_instance() -> dg.DagsterInstance:
    """This process's instance, opened on its first use and kept, as Dagster's webserver keeps
    one for all its requests: opening one reads every storage's schema version (a tenth of a
    second or more), and the API records each import and answers each progress poll through it.
    Callers never dispose it. A process whose instance folder changes (tests) gets a new one."""
    global _open_instance
    home = dagster_home()
    os.environ["DAGSTER_HOME"] = str(home)
    with _open_instance_lock:
        if _open_instance is None or _open_instance[0] != home:
            _open_instance = (home, _opened_instance(home))
        return _open_instance[1]


def _opened_instance(home: Path) -> dg.DagsterInstance:
    """The instance of ``home``; its storage is created once, under a lock, so parallel first
    commands (eight imports into a fresh STASH_HOME) never both create it (Dagster's SQLite
    schedule storage would then hold two alembic versions, and every later command fail)."""
    share_revision_maps()  # Dagster's storages read their migration scripts once a process
    if (home / CREATED).is_file():
        return dg.DagsterInstance.get()
    from filelock import FileLock

    try:
        lock = FileLock(home / f"{CREATED}.lock")
        lock.acquire()
    except OSError:  # a read-only DAGSTER_HOME: a deployment created its storage beforehand
        return dg.DagsterInstance.get()
    try:
        instance = dg.DagsterInstance.get()
        if not (home / CREATED).is_file():
            # Every storage now, while the lock is held (Dagster creates some on first use).
            instance.get_runs(limit=1)
            instance.all_instigator_state()
            instance.get_latest_materialization_event(dg.AssetKey("traces"))
            (home / CREATED).write_text("the storage of this instance is created\n")
        return instance
    finally:
        lock.release()


def record_traces_import(instance: dg.DagsterInstance, summary: Mapping[str, int],
                         breakdown: Mapping[str, Mapping[str, int]]) -> None:
    """A materialisation of the ``traces`` asset for one import, with its counts."""
    from stash_pipeline.defs.metadata import key_values

    metadata: dict[str, Any] = {k: v for k, v in summary.items() if isinstance(v, int)}
    metadata.update({f"by_{name}": key_values(dict(counts)) for name, counts in breakdown.items()})
    instance.report_runless_asset_event(dg.AssetMaterialization("traces", metadata=metadata))


def record_import(report: Any, warn: Callable[[str], None]) -> None:
    """Record an import (``services.imports.ImportReport``) as a ``traces`` materialisation.

    The import is already committed: a failure here is only warned about, never raised.
    """
    try:
        record_traces_import(get_instance(), report.summary, report.breakdown)
    except Exception as error:  # noqa: BLE001 - the UI's record never undoes a stored import
        warn(f"the import is stored, but recording it in Dagster failed: {error}")


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


def definitions() -> dg.Definitions:
    from stash_pipeline.definitions import defs

    return defs()


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
            existing = _run_of_key(instance, sensor_name, request.run_key)
            if existing is not None:
                if on_run:
                    on_run(f"waiting for run {existing.run_id} of {request.run_key}, "
                           "started elsewhere (a daemon)")
                runs.append(_finished(instance, existing.run_id, on_wait=on_run))
                continue
            tags.update({RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: sensor_name})
        job = defs.resolve_job_def(request.job_name or sensor.job_name)
        if on_run:
            on_run(f"running {job.name} for {request.partition_key or request.run_key}")
        with command_console(), _telling_wait(instance, tags[INVOCATION_TAG], on_run):
            result = job.execute_in_process(
                instance=instance, partition_key=request.partition_key, tags=tags,
                raise_on_error=False, run_config={**dict(request.run_config or {}),
                                                  **CONSOLE_INFO})
        runs.append(result.dagster_run)
        if not result.success:
            _record_failed_run(instance, defs, result)
    if once_per_run_key:  # a sensor asks only for keys without a run (sensor_cursors.unstarted)
        asked = [r for r in data.run_requests or () if wanted(r)]
        for key, existing in _started_elsewhere(instance, sensor_name, asked, partition_keys,
                                                run_keys):
            if on_run:
                on_run(f"waiting for run {existing.run_id} of {key}, started elsewhere "
                       "(a daemon)")
            runs.append(_finished(instance, existing.run_id, on_wait=on_run))
    return runs


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


def _run_of_key(instance: dg.DagsterInstance, sensor_name: str,
                run_key: str) -> dg.DagsterRun | None:
    """The newest run of ``sensor_name`` for ``run_key``, as the sensor daemon looks it up."""
    runs = instance.get_runs(filters=dg.RunsFilter(tags={RUN_KEY_TAG: run_key,
                                                         SENSOR_NAME_TAG: sensor_name}), limit=1)
    return runs[0] if runs else None


def _finished(instance: dg.DagsterInstance, run_id: str, poll_s: float = WAIT_POLL_S,
              on_wait: Callable[[str], None] | None = None) -> dg.DagsterRun:
    """The run once it ended; one whose process died (a killed `--wait`) is failed here.
    ``on_wait`` hears its wait for the worker whenever that changes."""
    teller = WaitTeller(instance, on_wait)
    while not (run := instance.get_run_by_id(run_id)).is_finished:
        if fail_abandoned_runs(instance, [run]):
            continue
        teller.tell(run_id)
        time.sleep(poll_s)
    return run


class WaitTeller:
    """Says "waiting for the worker: N runs ahead" (``defs.worker_queue``) each time N changes,
    from the first time a run is ahead (a run nothing is ahead of is not kept waiting)."""

    def __init__(self, instance: dg.DagsterInstance, say: Callable[[str], None] | None):
        self.instance, self.say, self.said = instance, say, None

    def tell(self, run_id: str) -> None:
        from stash_pipeline.defs.worker_queue import worker_wait

        if self.say is None:
            return
        wait = worker_wait(self.instance, run_id)
        if wait is None or wait.runs_ahead == self.said or (not wait.runs_ahead
                                                            and self.said is None):
            return
        self.say(wait.text())
        self.said = wait.runs_ahead


@contextmanager
def _telling_wait(instance: dg.DagsterInstance, invocation: str,
                  say: Callable[[str], None] | None) -> Iterator[None]:
    """While a run executes here, a thread tells its wait for the worker whenever it changes (the
    run's step waits for the reward_worker slot inside Dagster's executor)."""
    if say is None:
        yield
        return
    done = threading.Event()
    teller = WaitTeller(instance, say)

    def watch() -> None:
        while not done.wait(WAIT_POLL_S):
            try:
                runs = instance.get_runs(
                    filters=dg.RunsFilter(tags={INVOCATION_TAG: invocation}), limit=1)
                if runs:
                    teller.tell(runs[0].run_id)
            except Exception:  # noqa: BLE001 - telling the wait must never break the run
                continue

    watcher = threading.Thread(target=watch, name="wait-teller", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


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


def _record_failed_run(instance: dg.DagsterInstance, defs: dg.Definitions, result: Any) -> None:
    """What the run-failure sensor does in a deployment, for a run executed here."""
    failure = next((e for e in result.all_events if e.is_step_failure or e.is_run_failure), None)
    message = failure.message if failure is not None else "the run failed"
    dead_run_recorder(defs)(result.dagster_run, message)


def request_state(tags: Mapping[str, str],
                  instance: dg.DagsterInstance | None = None) -> dict[str, Any]:
    """Where the request whose run carries ``tags`` (a Score again request's) stands, from its
    run: ``status`` queued (no run yet, or its run waits for the worker), running (its run holds
    the worker), succeeded or failed (``error``: why, in the engine's or the step's words);
    ``wait`` what it waits for (``defs.worker_queue.Wait``), ``run_id``."""
    from stash_pipeline.defs.runs import run_failure_reason
    from stash_pipeline.defs.worker_queue import NOT_STARTED, run_with_tags, worker_wait

    instance = instance or get_instance()
    run = run_with_tags(instance, tags)
    if run is None:
        return {"status": "queued", "error": None, "wait": NOT_STARTED.to_dict(), "run_id": None}
    if run.is_finished:
        error = None if run.is_success else (
            "the run was cancelled" if run.status == dg.DagsterRunStatus.CANCELED
            else run_failure_reason(instance, run.run_id))
        return {"status": "succeeded" if run.is_success else "failed", "error": error,
                "wait": None, "run_id": run.run_id}
    wait = worker_wait(instance, run.run_id)
    return {"status": "queued" if wait else "running", "error": None,
            "wait": wait.to_dict() if wait else None, "run_id": run.run_id}


def model_wait(model: Any, instance: dg.DagsterInstance | None = None) -> dict[str, Any] | None:
    """What a queued personal model waits for (its run to be made, or the worker, with the runs
    ahead of it); None for a model that is not queued."""
    from stash_pipeline.defs.personal.partitions import ATTEMPT_TAG, MODEL_TAG
    from stash_pipeline.defs.worker_queue import request_wait, worker_wait

    if model.status != "queued":
        return None
    instance = instance or get_instance()
    wait = (worker_wait(instance, model.run_id) if model.run_id else
            request_wait(instance, {MODEL_TAG: model.id, ATTEMPT_TAG: str(model.attempt)}))
    return wait.to_dict() if wait else None


def model_queue_fields(model: Any) -> dict[str, Any]:
    """A model's JSON fields from the run queue: ``wait`` (``model_wait``) and ``score_again``
    (its latest Score again request's ``request_state``, with its number; None before one). The
    model's own status comes from the store: an unreadable instance leaves these None."""
    from stash_pipeline.defs.personal.partitions import MODEL_TAG, SCORE_AGAIN_TAG

    fields: dict[str, Any] = {"wait": None, "score_again": None}
    try:
        fields["wait"] = model_wait(model)
        if model.score_generation:
            fields["score_again"] = {"request": model.score_generation, **request_state(
                {MODEL_TAG: model.id, SCORE_AGAIN_TAG: str(model.score_generation)})}
    except Exception as error:  # noqa: BLE001 - the queue's view is a courtesy
        import logging

        logging.getLogger(__name__).warning("the run queue is unreadable: %s", error)
    return fields
