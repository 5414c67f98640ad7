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

The run's process is usually a spare started before the run (``run_spare``: Dagster and the code
location already imported, seconds of every run's start done while nobody waited), given the
run's ``execute_run`` arguments; a spare of another interpreter or older code is let go and the
run starts a process of its own.

The run's process is named in its ``stash/run_process`` tag (``host:pid:start``, as
``defs.abandoned_runs`` names processes): terminating the run sends it SIGINT, Dagster's own
interrupt (the run becomes cancelled, its steps and worker told to stop), and run monitoring
fails a run whose process ended without ending the run (killed), with the reason.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
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
PACKAGE = Path(__file__).resolve().parent


class Spares:
    """At most one spare run process (``run_spare``) for the next run, started after each
    launch; taken only by a run of the same interpreter while the project's code is unchanged."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spare: tuple[subprocess.Popen, str, int] | None = None  # process, python, code

    def take(self, python: str, arguments: list[str]) -> subprocess.Popen | None:
        """The spare, given these ``execute_run`` arguments; None when there is none fit."""
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is None:
            return None
        process, spare_python, code = spare
        if spare_python != python or code != code_version() or process.poll() is not None:
            _let_go(process)
            return None
        try:
            process.stdin.write((json.dumps(arguments) + "\n").encode())
            process.stdin.close()
        except OSError:  # it ended meanwhile
            _let_go(process)
            return None
        return process

    def prepare(self, python: str, instance_ref: str) -> None:
        """A spare for the next run, unless one is there, warmed on ``instance_ref`` (the
        serialized ref of the instance its run will use)."""
        with self._lock:
            if self._spare is not None:
                return
            process = subprocess.Popen([python, "-m", "stash_pipeline.run_spare"],
                                       stdin=subprocess.PIPE)
            try:
                process.stdin.write((instance_ref.replace("\n", " ") + "\n").encode())
                process.stdin.flush()
            except OSError:  # it ended at once: the next run starts a process of its own
                _let_go(process)
                return
            self._spare = (process, python, code_version())

    def let_go(self) -> None:
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            _let_go(spare[0])


def _let_go(process: subprocess.Popen) -> None:
    """End a spare that no run took: its stdin closed, it exits (reaped in a thread)."""
    try:
        process.stdin.close()
    except OSError:
        pass
    threading.Thread(target=process.wait, name="spare-run-process", daemon=True).start()


def code_version() -> int:
    """The newest modification time of the project's modules: a spare that imported older code
    is not used."""
    return max(path.stat().st_mtime_ns for path in PACKAGE.rglob("*.py"))


class ProcessRunLauncher(RunLauncher, ConfigurableClass):
    """Starts each run as ``python -m dagster api execute_run``, a child of the launching process
    (the daemon's run queue), in its process group: stopping the daemon or ``stash-pipeline
    dev`` stops its runs, replacing the code server does not."""

    def __init__(self, inst_data: ConfigurableClassData | None = None):
        self._inst_data = inst_data
        self._spares = Spares()
        super().__init__()

    def dispose(self) -> None:
        self._spares.let_go()
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
        process = self._spares.take(command[0], command[3:])
        how = "started before the run, its imports done"
        if process is None:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
            how = "started now"
        # Reaped when it ends, so that a finished run leaves no zombie behind the daemon.
        threading.Thread(target=process.wait, name=f"run-{run.run_id[:8]}", daemon=True).start()
        self._instance.add_run_tags(run.run_id, {RUN_PROCESS_TAG: process_tag(process.pid)})
        self._instance.report_engine_event(
            f"{STARTED} (pid {process.pid}) on this host, {how}.", run, cls=self.__class__)
        self._spares.prepare(command[0], serialize_value(self._instance.get_ref()))

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
