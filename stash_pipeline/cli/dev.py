"""`stash-pipeline dev`: the Dagster UI and daemon on the instance the CLI uses."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from stash_pipeline import dagster_runs

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "dev", help="open the Dagster UI (and run the sensors and schedules) on the local instance",
        description="Runs `dg dev` on the project's workspace.yaml (which names the code "
                    "location) on the instance the CLI records imports and runs in "
                    "(DAGSTER_HOME, else $STASH_HOME/dagster). Its daemon picks queued reward "
                    "models up.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3000)
    parser.add_argument("--no-resident-worker", dest="resident_worker", action="store_false",
                        help="start a worker process for every job, Score again's included, "
                             "instead of keeping one running with torch loaded (docs/worker.md)")
    parser.set_defaults(handler=run)


def dev_command(host: str, port: int, root: Path = PROJECT_ROOT) -> list[str]:
    """`dg dev` on the checkout's workspace.yaml, which names the code location once; an
    installed package without the checkout gets `dagster dev` on the module.

    A workspace, not `--target-path`: dg runs a project target from the project's folder, where
    the checkout's dagster.yaml (for a bare `dg dev`) makes Dagster warn that it is not the
    instance's; with a workspace it stays in the instance folder, whose dagster.yaml is in use."""
    workspace = root / "workspace.yaml"
    if workspace.is_file():
        dg = shutil.which("dg", path=str(Path(sys.executable).parent)) or shutil.which("dg")
        if dg:
            return [dg, "dev", "--workspace", str(workspace), "--host", host, "--port", str(port)]
    return [sys.executable, "-m", "dagster", "dev", "-m", "stash_pipeline.definitions",
            "--host", host, "--port", str(port)]


# After Ctrl-C or SIGTERM, how long `dg dev` gets to stop its webserver, daemon, code servers and
# runs; then every process it started is killed.
STOP_GRACE_S = 30.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
POLL_S = 0.5


def run(args: argparse.Namespace) -> int:
    from stash_pipeline.core.home import stash_home

    # Absolute, so every process reads the same store whatever its working directory.
    os.environ["STASH_HOME"] = str(stash_home(os.environ))
    home = dagster_runs.dagster_home()
    os.environ["DAGSTER_HOME"] = str(home)
    if sys.prefix != sys.base_prefix:  # this interpreter's virtualenv is the active one
        os.environ.setdefault("VIRTUAL_ENV", sys.prefix)
    resident = start_resident(args)
    try:
        # In the instance folder: its dagster.yaml is the one in use, so Dagster does not warn
        # about the checkout's (for a bare `dg dev` there) being ignored.
        return supervise(dev_command(args.host, args.port), cwd=home if home.is_dir() else None)
    finally:
        if resident is not None:
            from stash_pipeline.compute.resident import stop_resident_worker

            stop_resident_worker(resident)
        dagster_runs.forget_daemon()


def start_resident(args: argparse.Namespace) -> subprocess.Popen | None:
    """The resident worker for the local compute's scoring jobs (Score again in seconds), unless
    turned off or the worker runs elsewhere (RM_COMPUTE=modal)."""
    if not getattr(args, "resident_worker", True) or os.environ.get("RM_COMPUTE",
                                                                    "local") != "local":
        return None
    from stash_pipeline.compute.resident import start_resident_worker

    python = os.environ.get("RM_WORKER_PYTHON") or sys.executable
    process, path = start_resident_worker(python)
    print(f"stash-pipeline dev: the resident worker (pid {process.pid}) takes scoring jobs on "
          f"{path}", file=sys.stderr, flush=True)
    return process


def supervise(command: list[str], *, cwd: Path | None = None,
              grace_s: float = STOP_GRACE_S) -> int:
    """Run ``command`` in a process group of its own, which holds every process it starts (dg
    dev's webserver, daemon, code servers and the runs they launch), and stop them all on Ctrl-C,
    SIGTERM or SIGHUP: SIGINT to the group, as a terminal's Ctrl-C sends it; past ``grace_s``, or
    on a second signal, SIGKILL. Whatever is left when the command ends is ended too. The
    command's exit status."""
    process = subprocess.Popen(command, cwd=cwd, start_new_session=True,
                               preexec_fn=_interruptible)
    stopping_since: float | None = None

    def stop(_signal: int, _frame: object) -> None:
        nonlocal stopping_since
        if stopping_since is None:
            stopping_since = time.monotonic()
            _signal_group(process.pid, signal.SIGINT)
        else:  # asked again: at once
            _signal_group(process.pid, signal.SIGKILL)

    previous = {number: signal.signal(number, stop) for number in STOP_SIGNALS}
    try:
        while True:
            try:
                code = process.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                if stopping_since is not None and time.monotonic() - stopping_since > grace_s:
                    _signal_group(process.pid, signal.SIGKILL)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        _end_group(process.pid)
    return code


def _interruptible() -> None:
    """In the child: Ctrl-C's signal at its default, even when this command was started with it
    ignored (a shell's background job), so dg dev and its children handle it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _signal_group(group: int, number: int) -> bool:
    """Send ``number`` to the process group; False when no process is left in it."""
    try:
        os.killpg(group, number)
        return True
    except ProcessLookupError:
        return False


def _end_group(group: int, grace_s: float = 5.0) -> None:
    """SIGTERM to what is left of the group, SIGKILL to what outlives ``grace_s``."""
    if not _signal_group(group, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _signal_group(group, 0):
            return
        time.sleep(0.1)
    _signal_group(group, signal.SIGKILL)
