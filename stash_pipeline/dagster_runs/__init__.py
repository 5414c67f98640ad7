"""The one door to the Dagster instance for the HTTP API, the viewer and the CLI: run state, an
import's record, and the ``--wait`` commands' runs (made by a running daemon, else executed in
this process).

Each function here only delegates, importing its module when called: importing this package
loads no Dagster (the CLI's ``--help`` and the API's start pay for none). Inside the package:
``instance`` opens the instance and loads the definitions, ``run_state`` and ``progress`` read
where work stands, ``import_history`` records an import, ``daemon_waits`` leaves a request to
a running daemon and waits for its run, ``in_process`` runs a sensor's requests here,
``waits`` waits on runs and tells their wait for the worker, ``dead_runs`` fails and records the
runs that died, ``console`` is what such a run prints. Tests may use those modules directly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import dagster as dg

    from stash_pipeline.dagster_runs.progress import RunProgress


def dagster_home() -> Path:
    """The instance folder (``DAGSTER_HOME``, else ``$STASH_HOME/dagster``, created)."""
    from stash_pipeline.dagster_runs import instance

    return instance.dagster_home()


def record_import(report: Any, warn: Callable[[str], None]) -> None:
    """An import in the instance's asset history (``import_history.record_import``); a failure
    is warned about, never raised."""
    from stash_pipeline.dagster_runs import import_history

    import_history.record_import(report, warn)


def run_progress(run_id: str) -> RunProgress:
    """How far a running run got (its step, the worker's newest progress line)."""
    from stash_pipeline.dagster_runs import progress

    return progress.run_progress(run_id)


def request_state(tags: Mapping[str, str]) -> dict[str, Any]:
    """Where the request whose run carries ``tags`` stands (``run_state.request_state``)."""
    from stash_pipeline.dagster_runs import run_state

    return run_state.request_state(tags)


def model_queue_fields(model: Any, score_again_queued: int = 0) -> dict[str, Any]:
    """A model's wait and latest Score again from the run queue, with the owner's traces still
    queued for that Score again (``run_state.model_queue_fields``)."""
    from stash_pipeline.dagster_runs import run_state

    return run_state.model_queue_fields(model, score_again_queued)


def training_run_result(run_id: str) -> tuple[str | None, list[str]]:
    """A shared-training run's candidate (None before it made one) and its failed steps."""
    from stash_pipeline.dagster_runs import run_state

    return run_state.training_run_result(run_id)


def run_sensor(sensor: str, *, partition_keys: Sequence[str] | None = None,
               run_keys: Sequence[str] | None = None, once_per_run_key: bool = False,
               on_run: Callable[[str], None] | None = None) -> list[dg.DagsterRun]:
    """Evaluate the pipeline's ``sensor`` once and run what it requests, in this process, on this
    process's instance (``in_process.run_sensor_requests``); the finished runs."""
    from stash_pipeline.dagster_runs import in_process, instance

    return in_process.run_sensor_requests(
        instance.get_instance(), instance.definitions(), sensor, partition_keys=partition_keys,
        run_keys=run_keys, once_per_run_key=once_per_run_key, on_run=on_run)


def forget_daemon() -> None:
    """The daemon of this instance has ended (``stash-pipeline dev`` stopped): its heartbeats
    go, so a `--wait` command runs in process at once instead of waiting for them to age. A
    failure is ignored (the heartbeats then age out)."""
    from stash_pipeline.dagster_runs import instance

    try:
        instance.get_instance().wipe_daemon_heartbeats()
    except Exception:  # noqa: BLE001 - stopping must not fail for it
        pass


def requested_runs(sensor: str, run_keys: Sequence[str], *,
                   on_run: Callable[[str], None] | None = None) -> list[dg.DagsterRun]:
    """A `--wait` command's runs, those ``sensor`` makes for ``run_keys``, once they ended: made
    by a running daemon, in the run queue with everything else, else executed in this process
    (``daemon_waits.requested_runs``)."""
    from stash_pipeline.dagster_runs import daemon_waits, instance

    return daemon_waits.requested_runs(instance.get_instance(), instance.definitions(), sensor,
                                       run_keys, on_run=on_run)


def background_scored(store: Any, *, on_run: Callable[[str], None] | None = None) -> int | None:
    """Wait while a running daemon scores the scoring queue's work queued now
    (``daemon_waits.background_scored``): the failed chunks; None where no daemon works the
    instance, or it stopped answering."""
    from stash_pipeline.dagster_runs import daemon_waits, instance

    if not daemon_works("pending_scoring"):
        return None
    return daemon_waits.background_scored(instance.get_instance(), store, on_run=on_run)


def daemon_works(sensor: str) -> bool:
    """Whether a running daemon ticks ``sensor`` on this instance (``daemon_waits``)."""
    from stash_pipeline.dagster_runs import daemon_waits, instance

    found = instance.get_instance()
    return daemon_waits.daemon_answers(found) and not daemon_waits.sensor_stopped(found, sensor)


def model_chunks_scored(store: Any, model_id: str, *,
                        on_run: Callable[[str], None] | None = None) -> int | None:
    """Wait while a running daemon's background chunks score what is still queued for a model's
    Score again (``daemon_waits.queue_worked``): the failed chunks; None where no daemon works
    the instance, or it stopped answering."""
    from stash_pipeline.dagster_runs import daemon_waits, instance

    if not daemon_works("pending_scoring"):
        return None
    return daemon_waits.queue_worked(
        instance.get_instance(), store, lambda: store.score_again_queued(model_id),
        "the pipeline's background chunks: {left} of {total} of your traces still queued for "
        + model_id, evaluator=model_id, on_run=on_run)


def run_sensor_until_done(sensor: str, *, on_run: Callable[[str], None] | None = None) -> int:
    """``run_sensor`` tick after tick until a tick requests nothing or a run fails
    (``in_process.run_sensor_until_done``); the number of failed runs."""
    from stash_pipeline.dagster_runs import in_process, instance

    return in_process.run_sensor_until_done(instance.get_instance(), instance.definitions(),
                                            sensor, on_run=on_run)


def scoring_chunks_in_flight() -> int:
    """The scoring queue's background chunks queued or running (``defs.scoring.sensors``)."""
    from stash_pipeline.dagster_runs import instance
    from stash_pipeline.defs.scoring.sensors import in_flight

    return in_flight(instance.get_instance()).chunks


def fail_abandoned_runs() -> list[dg.DagsterRun]:
    """Fail the runs whose command was killed (``dead_runs.fail_abandoned_runs``); the runs
    failed now."""
    from stash_pipeline.dagster_runs import dead_runs, instance

    return dead_runs.fail_abandoned_runs(instance.get_instance())
