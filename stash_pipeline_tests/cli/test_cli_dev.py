"""`stash-pipeline dev` runs `dg dev` on the checkout's workspace, whose yaml names the code
location, from the instance folder: it starts without a warning."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from stash_pipeline.cli.dev import PROJECT_ROOT, dev_command
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, SERVER_START_S, bound, wait_until


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


def ignoring_ctrl_c() -> None:
    """How a shell without job control starts a background job (a CI script's ``&``): with
    SIGINT ignored, which an exec keeps."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_dev_starts_without_a_warning_and_stops_with_every_child(tmp_path, stop):
    """The UI serves and the daemon ticks the sensors (the code location loaded) with no warning
    printed: not the code location's name, not the checkout's dagster.yaml (the instance's is
    the one in use), not the virtualenv. Ctrl-C or SIGTERM to the command then ends it and every
    process it started (the webserver, the daemon, the code servers), even when it was started
    as a background job, with Ctrl-C's signal ignored."""
    cli = shutil.which("stash-pipeline", path=str(Path(sys.executable).parent))
    assert cli, "the stash-pipeline script is installed with the project"
    log = tmp_path / "dev.log"
    with log.open("w") as out:
        process = subprocess.Popen([cli, "dev", "--port", str(_free_port())], cwd=PROJECT_ROOT,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                   preexec_fn=ignoring_ctrl_c,
                                   env={**os.environ, "STASH_HOME": str(tmp_path / "home")})
    try:
        wait_until(lambda: process.poll() is not None or (
            "Serving dagster-webserver" in log.read_text()
            and "Checking for new runs for sensor" in log.read_text()),
            timeout_s=SERVER_START_S, what="dg dev to serve the UI and tick a sensor")
        started = log.read_text()  # the start; what shutting down prints is not in question
        assert process.poll() is None, started
        children = descendants(process.pid)
        assert len(children) >= 4, children  # dg, its webserver, daemon and code server
        process.send_signal(stop)
        assert process.wait(timeout=bound(PROCESS_EXIT_S)) == 0, log.read_text()
        wait_until(lambda: not [pid for pid in children if alive(pid)],
                   timeout_s=SERVER_START_S, what="every process dg dev started to end")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    warnings = [line for line in started.splitlines() if "WARNING" in line or "Warning" in line]
    assert warnings == [], started


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found.extend(children)
        todo.extend(children)
    return found


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to read its status is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
