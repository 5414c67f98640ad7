"""RM_COMPUTE=local: the worker as a subprocess of the Dagster step, through Dagster Pipes, or a
scoring job handed to the resident worker when ``RM_RESIDENT_WORKER`` names one
(``compute.resident``).

``python -m stash_pipeline.worker JOB_DIR`` runs with ``RM_WORKER_PYTHON`` in the job directory.
Its per-step loss and pairs/s arrive as Pipes log events in the run; its metrics as a Pipes message.
The launch is ``open_pipes_session`` plus ``Popen`` rather than ``PipesSubprocessClient``, because
the caller needs the exit status (a negative one names the signal that killed the worker) and a time
limit.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from stash_pipeline.compute.contract import CHECKPOINT_INPUT, read_settings
from stash_pipeline.compute.outcome import StderrTail, WorkerExit, WorkerFailed, check_worker_exit
from stash_pipeline.compute.parent_death import signal_when_parent_dies
from stash_pipeline.compute.pipes import TempFileMessageReader
from stash_pipeline.compute.resident import run_resident_worker
from stash_pipeline.compute.upload import upload_checkpoint
from stash_pipeline.core.failures import hide_server_paths
from stash_pipeline.core.home import absolute

# After SIGTERM the worker logs why it stops; past this it is killed.
TERMINATION_GRACE_S = 30


@dataclass(frozen=True)
class LocalCompute:
    """The worker as a subprocess of the step (``compute.run.Compute``)."""

    python: str  # the worker's interpreter: RM_WORKER_PYTHON
    timeout_s: float | None = None
    resident: str | None = None  # the resident worker's socket: RM_RESIDENT_WORKER

    def run(self, context: Any, job_dir: Path, objects: Any, *, upload_key: str | None = None,
            checkpoint_uri: str | None = None) -> str | None:
        job_dir = absolute(job_dir)  # the worker starts in it: a relative path would miss it
        if checkpoint_uri:
            objects.get_file(checkpoint_uri, job_dir / CHECKPOINT_INPUT)
        check_worker_exit(job_dir, self.launch(context, job_dir))
        return upload_checkpoint(objects, job_dir, upload_key) if upload_key else None

    def launch(self, context: Any, job_dir: Path) -> WorkerExit:
        """Run the worker on ``job_dir`` to its end (the one step a test's compute replaces): a
        scoring job on the resident worker when one answers, else a new process."""
        if self.resident and not read_settings(job_dir).is_training:
            done = run_resident_worker(context, job_dir, self.resident, timeout_s=self.timeout_s)
            if done is not None:
                return done
        return run_local_worker(context, job_dir, python=self.python, timeout_s=self.timeout_s)


def run_local_worker(context: Any, job_dir: Path, *, python: str,
                     timeout_s: float | None = None,
                     env: dict[str, str] | None = None) -> WorkerExit:
    """Run the job in ``job_dir`` (absolute: the worker starts in it) to its end; the exit
    status, the Pipes messages and the end of the worker's stderr come back. An interpreter that
    cannot be started is WorkerFailed with the reason."""
    with dg.open_pipes_session(context=context, context_injector=dg.PipesEnvContextInjector(),
                               message_reader=TempFileMessageReader()) as session:
        try:
            process = subprocess.Popen(
                [python, "-m", "stash_pipeline.worker", str(job_dir)], cwd=job_dir,
                env={**os.environ, **(env or {}), **session.get_bootstrap_env_vars()},
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group: a signal reaches its children
                preexec_fn=_die_with_parent)
        except OSError as error:
            raise WorkerFailed(hide_server_paths(
                f"the worker did not start: {python} -m stash_pipeline.worker "
                f"(RM_WORKER_PYTHON): {error.strerror or error}")) from error
        stderr = StderrTail(process.stderr).start()
        timed_out = False
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            code = _terminate(process)
        except BaseException:  # the run was cancelled (DagsterExecutionInterruptedError) or died
            _terminate(process)
            raise
    return WorkerExit(code, timed_out=timed_out, timeout_s=timeout_s,
                      messages=tuple(session.get_custom_messages()), stderr=stderr.text())


def _die_with_parent() -> None:
    """In the worker, before it starts: SIGTERM (it logs why it stops) when its caller dies, so
    a `--wait` command killed with SIGKILL leaves no worker running on."""
    signal_when_parent_dies(signal.SIGTERM)


def _terminate(process: subprocess.Popen) -> int:
    """SIGTERM (the worker logs the reason), then SIGKILL after the grace period."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        return process.wait(timeout=TERMINATION_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        return process.wait()
    except ProcessLookupError:
        return process.wait()
