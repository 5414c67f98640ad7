"""`stash-pipeline dev` runs `dg dev` on the checkout's workspace, whose yaml names the code
location, from the instance folder: it starts without a warning."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stash_pipeline.cli.dev import PROJECT_ROOT, dev_command

from waiting import PROCESS_EXIT_S, SERVER_START_S, bound, wait_until


def test_a_checkout_runs_dg_dev_on_its_workspace():
    command = dev_command("127.0.0.1", 3001)
    assert Path(command[0]).name == "dg" and Path(command[0]).is_file()
    assert command[1:] == ["dev", "--workspace", str(PROJECT_ROOT / "workspace.yaml"),
                           "--host", "127.0.0.1", "--port", "3001"]
    assert "location_name: stash_pipeline" in (PROJECT_ROOT / "workspace.yaml").read_text()


def test_an_installed_package_without_the_project_runs_dagster_dev(tmp_path):
    command = dev_command("0.0.0.0", 3000, root=tmp_path)
    assert command[1:5] == ["-m", "dagster", "dev", "-m"] and command[-2:] == ["--port", "3000"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def interruptible_children() -> Iterator[None]:
    """Children started inside see SIGINT. A shell without job control starts a background job
    (a CI script's ``&``) with SIGINT ignored, an ignored signal stays ignored across exec, and dg
    dev would never see the test's SIGINT; a caught one is reset to the default instead."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_dev_starts_without_a_warning(tmp_path):
    """The UI serves and the daemon ticks the sensors (the code location loaded) with no warning
    printed: not the code location's name, not the checkout's dagster.yaml (the instance's is
    the one in use), not the virtualenv."""
    cli = shutil.which("stash-pipeline", path=str(Path(sys.executable).parent))
    assert cli, "the stash-pipeline script is installed with the project"
    log = tmp_path / "dev.log"
    with log.open("w") as out, interruptible_children():
        # Its own session: dg dev starts the webserver and the daemon as its children.
        process = subprocess.Popen([cli, "dev", "--port", str(_free_port())], cwd=PROJECT_ROOT,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: process.poll() is not None or (
            "Serving dagster-webserver" in log.read_text()
            and "Checking for new runs for sensor" in log.read_text()),
            timeout_s=SERVER_START_S, what="dg dev to serve the UI and tick a sensor")
        started = log.read_text()  # the start; what shutting down prints is not in question
        assert process.poll() is None, started
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # dg dev shuts its children down on SIGINT
            try:
                process.wait(timeout=bound(PROCESS_EXIT_S))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    warnings = [line for line in started.splitlines() if "WARNING" in line or "Warning" in line]
    assert warnings == [], started
