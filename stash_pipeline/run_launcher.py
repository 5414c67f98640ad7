"""Each run a process of its own on this host, never a process inside the code server.

Dagster's ``DefaultRunLauncher`` asks the code server to start a run, and the server runs it as
its own child: a code server with a run inside then ignores SIGTERM until the run ends (it waits
for its runs before it stops), so a new image waits for the longest training, and a second
SIGTERM leaves its port listening but answering nothing. This launcher starts the run where the
run queue launches it (the daemon, on the code server's host): ``<the code server's python> -m
dagster api execute_run``, the command an ECS run task runs, which loads the run's code from the
code location's module. The code server can then be replaced at any time (README, "Replacing a
code server"): a run keeps going to its end in its own process, and the next runs load the new
server's code (and interpreter, when it moved).

The run's process is forked from a forker the first launch starts and later ones keep
(``run_forker``: Dagster and the code location imported once, not seconds of every run's start
again); a forker of another interpreter or older code is let go and another started, and a
launch no forker answers starts a process of its own.

The run's process is named in its ``stash/run_process`` tag (``host:pid:start``, as
``defs.abandoned_runs`` names processes): terminating the run sends it SIGINT, Dagster's own
interrupt (the run becomes cancelled, its steps and worker told to stop), and run monitoring
fails a run whose process ended without ending the run (killed), with the reason.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dagster import DagsterRun
from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, RunLauncher, WorkerStatus
from dagster._grpc.types import ExecuteRunArgs
from dagster._serdes import ConfigurableClass, ConfigurableClassData, serialize_value

from stash_pipeline.defs.abandoned_runs import process_gone, process_tag

RUN_PROCESS_TAG = "stash/run_process"
# The words of the engine event that names a run's process (tests look for them).
STARTED = "Started the run's process"
FORKED = "forked from the run forker, its imports done"
PACKAGE = Path(__file__).resolve().parent
# How long a launch waits for the forker's answer: its first one follows its imports (3 CPU-s,
# tens of seconds on a loaded machine); a later one, a fork.
FORK_REPLY_S = 120.0


class Forker:
    """The forker (``run_forker``) each run's process is forked from: started by the first
    launch and kept, Dagster and the code location imported once, for runs of its interpreter
    while the project's code is unchanged (else it is let go and another started)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # process, its reply pipe, python, code version
        self._forker: tuple[subprocess.Popen, int, str, int] | None = None

    def fork(self, python: str, arguments: list[str], instance_ref: str) -> int | None:
        """The pid of a run's process forked with these ``execute_run`` arguments; None when no
        forker answers (the caller starts a process of its own)."""
        with self._lock:
            forker = self._forker
            if forker is not None and (forker[2] != python or forker[3] != code_version()
                                       or forker[0].poll() is not None):
                self._let_go_locked()
                forker = None
            if forker is None:
                forker = self._start_locked(python, instance_ref)
                if forker is None:
                    return None
            process, replies = forker[0], forker[1]
            try:
                process.stdin.write((json.dumps(arguments) + "\n").encode())
                process.stdin.flush()
                return int(_reply(replies, FORK_REPLY_S))
            except (OSError, ValueError, TimeoutError):  # it ended, or never answered
                self._let_go_locked()
                return None

    def _start_locked(self, python: str,
                      instance_ref: str) -> tuple[subprocess.Popen, int, str, int] | None:
        read, write = os.pipe()
        try:
            process = subprocess.Popen([python, "-m", "stash_pipeline.run_forker", str(write)],
                                       stdin=subprocess.PIPE, pass_fds=(write,))
        except OSError:
            os.close(read)
            return None
        finally:
            os.close(write)
        self._forker = (process, read, python, code_version())
        try:
            process.stdin.write((instance_ref.replace("\n", " ") + "\n").encode())
            process.stdin.flush()
        except OSError:  # it ended at once
            self._let_go_locked()
            return None
        return self._forker

    def let_go(self) -> None:
        with self._lock:
            self._let_go_locked()

    def _let_go_locked(self) -> None:
        """The forker's stdin closed: it exits once its loop sees it (reaped in a thread); runs it
        forked go on."""
        forker, self._forker = self._forker, None
        if forker is None:
            return
        process, replies = forker[0], forker[1]
        os.close(replies)
        try:
            process.stdin.close()
        except OSError:
            pass
        threading.Thread(target=process.wait, name="run-forker", daemon=True).start()


def _reply(fd: int, timeout_s: float) -> str:
    """One line from the forker's reply pipe; TimeoutError past ``timeout_s``, ValueError at its
    end (the forker ended)."""
    data = b""
    deadline = time.monotonic() + timeout_s
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError("the run forker did not answer")
        chunk = os.read(fd, 64)
        if not chunk:
            raise ValueError("the run forker ended")
        data += chunk
    return data.decode().strip()


def code_version() -> int:
    """The newest modification time of the project's modules: a forker that imported older code
    is not used."""
    return max(path.stat().st_mtime_ns for path in PACKAGE.rglob("*.py"))


class ProcessRunLauncher(RunLauncher, ConfigurableClass):
    """Starts each run as ``python -m dagster api execute_run``, a child of the launching process
    (the daemon's run queue), in its process group: stopping the daemon or ``stash-pipeline
    dev`` stops its runs, replacing the code server does not."""

    def __init__(self, inst_data: ConfigurableClassData | None = None):
        self._inst_data = inst_data
        self._forker = Forker()
        super().__init__()

    def dispose(self) -> None:
        self._forker.let_go()
        super().dispose()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict:
        return {}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData,
                          config_value: Mapping[str, Any]) -> ProcessRunLauncher:
        return cls(inst_data=inst_data)

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        if run.job_code_origin is None:
            raise ValueError(f"run {run.run_id} has no code origin to load its job from")
        arguments = ExecuteRunArgs(job_origin=run.job_code_origin, run_id=run.run_id,
                                   instance_ref=self._instance.get_ref(),
                                   set_exit_code_on_failure=True).get_command_args()
        command = run_command(run.job_code_origin.executable_path, arguments)
        pid = self._forker.fork(command[0], command[3:],
                                serialize_value(self._instance.get_ref()))
        how = FORKED
        if pid is None:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
            # Reaped when it ends, so that a finished run leaves no zombie behind the daemon.
            threading.Thread(target=process.wait, name=f"run-{run.run_id[:8]}",
                             daemon=True).start()
            pid, how = process.pid, "started now"
        self._instance.add_run_tags(run.run_id, {RUN_PROCESS_TAG: process_tag(pid)})
        self._instance.report_engine_event(
            f"{STARTED} (pid {pid}) on this host, {how}.", run, cls=self.__class__)

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        tag = run.tags.get(RUN_PROCESS_TAG)
        self._instance.report_run_canceling(run)
        if not tag or process_gone(tag) or not _on_this_host(tag):
            self._instance.report_engine_event(
                "The run's process is not running on this host: nothing to stop.", run,
                cls=self.__class__)
            return False
        os.kill(_pid(tag), signal.SIGINT)
        return True

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        """Run monitoring's question. A run this launcher did not start here (one a `--wait`
        command executes, which ``defs.abandoned_runs`` watches) is left to its timeouts, as
        Dagster's default launcher leaves every run."""
        tag = run.tags.get(RUN_PROCESS_TAG)
        if not tag or not _on_this_host(tag):
            return CheckRunHealthResult(WorkerStatus.RUNNING, "not a process of this host")
        if process_gone(tag):
            return CheckRunHealthResult(
                WorkerStatus.FAILED, f"the run's process (pid {_pid(tag)}) ended before the run "
                "did (it was killed); retry the run")
        return CheckRunHealthResult(WorkerStatus.RUNNING)


def run_command(python: str, arguments: list[str]) -> list[str]:
    """``execute_run`` through the code location's own interpreter: a code server that `dg dev`
    starts records the bare entry point ``dagster``, which is not on ``PATH`` when the virtualenv
    is not activated (``.venv/bin/stash-pipeline dev``), and every launch would then fail."""
    start = arguments.index("api")
    return [python or sys.executable, "-m", "dagster", *arguments[start:]]


def _on_this_host(tag: str) -> bool:
    return tag.rsplit(":", 2)[0] == socket.gethostname()


def _pid(tag: str) -> int:
    return int(tag.rsplit(":", 2)[1])
