"""A step's side of the resident worker (``worker.resident``): hand it a job directory over its
Unix socket instead of starting a worker process, when ``RM_RESIDENT_WORKER`` names one.

The job is the same job (``write_job``'s directory, the worker's ``runner.main``, its log and
Pipes events in the run); only the process is not new. A scoring-only job goes there; a training
job keeps a process of its own (its memory is returned when it ends). No resident worker
answering (not started, stopped, another interpreter's) means a new process, as without one.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import dagster as dg

from stash_pipeline.compute.contract import read_resident_message, resident_message
from stash_pipeline.compute.outcome import WorkerExit, WorkerFailed
from stash_pipeline.compute.parent_death import signal_when_parent_dies
from stash_pipeline.compute.pipes import TempFileMessageReader

# How long a resident worker just started gets to listen on its socket (an interpreter's start
# and a few modules: under a second idle, seconds on a loaded machine) before jobs start their
# own processes instead.
LISTEN_WAIT_S = 60.0
RESIDENT_ENV = "RM_RESIDENT_WORKER"  # the resident worker's socket (`stash-pipeline dev` sets it)
# The words of the run's event that says which worker took the job (tests look for them).
SERVED = "scored by the resident worker"
# After the step gives up (its time limit), how long the resident worker gets to stop the job.
STOP_GRACE_S = 30.0


def connect(path: str) -> socket.socket | None:
    """A connection to the resident worker at ``path``, or None when none answers there."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(path)
    except OSError:
        client.close()
        return None
    return client


def run_resident_worker(context: Any, job_dir: Path, path: str, *,
                        timeout_s: float | None = None) -> WorkerExit | None:
    """Run the job in ``job_dir`` on the resident worker at ``path`` to its end; None (nothing
    run) when no resident worker answers there. A resident worker that ends during the job is
    WorkerFailed with the reason."""
    client = connect(path)
    if client is None:
        context.log.info(f"no resident worker answers at {path}: the job starts a new worker "
                         "process")
        return None
    with client, dg.open_pipes_session(context=context,
                                       context_injector=dg.PipesEnvContextInjector(),
                                       message_reader=TempFileMessageReader()) as session:
        stream = client.makefile("rb")
        try:
            client.sendall(resident_message({"job_dir": str(job_dir),
                                   "env": session.get_bootstrap_env_vars()}))
            pid = int(read_resident_message(stream)["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            context.log.info(f"the resident worker at {path} did not take the job: it starts a "
                             "new worker process")
            return None
        context.log.info(f"{SERVED} (pid {pid}): no new process, torch already loaded")
        timed_out = False
        client.settimeout(timeout_s)
        try:
            code = int(read_resident_message(stream)["exit"])
        except TimeoutError:
            timed_out = True
            code = _stop(client, stream)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise WorkerFailed(f"the resident worker (pid {pid}) ended during the job "
                               f"({error}); the next job starts it again or a new process")
        except BaseException:  # the run was cancelled: the closed connection stops the job
            client.shutdown(socket.SHUT_RDWR)
            raise
    return WorkerExit(code, timed_out=timed_out, timeout_s=timeout_s,
                      messages=tuple(session.get_custom_messages()))


def _stop(client: socket.socket, stream: IO[bytes]) -> int:
    """Past the time limit: close this side (the resident worker stops the job through its
    failure path) and wait for its exit status."""
    client.shutdown(socket.SHUT_WR)
    client.settimeout(STOP_GRACE_S)
    try:
        return int(read_resident_message(stream)["exit"])
    except (OSError, ValueError, KeyError, TypeError):
        return -signal.SIGTERM


def start_resident_worker(python: str) -> tuple[subprocess.Popen, str]:
    """The resident worker (``python -m stash_pipeline.worker.resident``) on a new socket, named
    in ``RM_RESIDENT_WORKER`` for the processes this one starts (the daemon's runs). It is killed
    if this process dies without stopping it (``stop_resident_worker``)."""
    path = os.environ.get(RESIDENT_ENV) or str(
        Path(tempfile.gettempdir()) / f"stash-worker-{os.getpid()}.sock")
    process = subprocess.Popen([python, "-m", "stash_pipeline.worker.resident", path],
                               stdin=subprocess.DEVNULL, start_new_session=True,
                               preexec_fn=lambda: signal_when_parent_dies(signal.SIGKILL))
    os.environ[RESIDENT_ENV] = path
    return process, path


def stop_resident_worker(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM (a job in progress ends through its failure path), SIGKILL past ``grace_s``."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def resident_worker_while(python: str | None = None) -> Iterator[str | None]:
    """A resident worker for the scoring jobs this process runs while the block runs (a
    ``--wait`` command working several chunks in its own process: torch loaded once, not once a
    chunk), stopped after it; the one named in ``RM_RESIDENT_WORKER`` when it answers (`dev`'s).
    None, and nothing started, where the worker does not run here (``RM_COMPUTE`` other than
    local). Its socket listens before torch loads, so the first job waits in its backlog.
    ``python``: the worker's interpreter (``RM_WORKER_PYTHON``, else this one)."""
    if os.environ.get("RM_COMPUTE", "local") != "local":
        yield None
        return
    named = os.environ.get(RESIDENT_ENV)
    if named and (client := connect(named)) is not None:
        client.close()
        yield named
        return
    process, path = start_resident_worker(
        python or os.environ.get("RM_WORKER_PYTHON") or sys.executable)
    try:
        yield path if _listening(process, path) else None
    finally:
        stop_resident_worker(process)
        Path(path).unlink(missing_ok=True)  # SIGTERM ends it without its own cleanup
        if named is None:
            os.environ.pop(RESIDENT_ENV, None)
        else:
            os.environ[RESIDENT_ENV] = named


def _listening(process: subprocess.Popen, path: str, timeout_s: float = LISTEN_WAIT_S) -> bool:
    """Whether the resident worker just started listens at ``path`` (before torch loads), within
    ``timeout_s``; False once it ended."""
    deadline = time.monotonic() + timeout_s
    while process.poll() is None and time.monotonic() < deadline:
        if (client := connect(path)) is not None:
            client.close()
            return True
        time.sleep(0.05)
    return False
