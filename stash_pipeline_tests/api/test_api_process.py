"""`stash-pipeline api` as its own process (SQLite under a STASH_HOME of the test's own): a killed
server's import temporaries are removed at its next start, a bad signing.key is one line, and
Ctrl-C with a client connected prints no traceback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from stash_pipeline_tests.support.api_helpers import loopback_socket
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, SERVER_START_S, bound, wait_until

REPO = Path(__file__).resolve().parents[2]
PREFIX = "stash-api-import-"


@pytest.fixture
def environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "STASH_SIGNING_KEY")}
    (tmp_path / "tmp").mkdir()
    return {**env, "STASH_HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path / "tmp"),
            "DAGSTER_HOME": str(tmp_path / "dagster"), "STASH_API_SHUTDOWN_TIMEOUT_S": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stash_pipeline", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=bound(PROCESS_EXIT_S))


def free_port() -> int:
    sock = loopback_socket()
    port = sock.getsockname()[1]
    sock.close()
    return port


class Server:
    def __init__(self, env: dict[str, str]):
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "stash_pipeline", "api", "--port", str(self.port)], cwd=REPO,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def accepting() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"stash-pipeline api exited: {self.process.stdout.read()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                return False
            return True

        wait_until(accepting, timeout_s=SERVER_START_S, what="stash-pipeline api", interval_s=0.1)

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port))

    def output(self) -> str:
        out, _ = self.process.communicate(timeout=bound(PROCESS_EXIT_S))
        return out


@pytest.fixture
def key(environment: dict[str, str]) -> str:
    made = cli(environment, "accounts", "create", "--name", "ana", "--json")
    assert made.returncode == 0, made.stderr
    return json.loads(made.stdout)["api_key"]


def half_an_import(conn: socket.socket, key: str) -> None:
    """An import whose body stops at 5,000 of its 100,000 bytes: the server is writing it."""
    conn.sendall(f"POST /api/v1/traces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                 "Content-Type: application/x-ndjson\r\nContent-Length: 100000\r\n\r\n"
                 .encode() + b"x" * 5000)


def temporaries(env: dict[str, str]) -> list[str]:
    return sorted(p.name for p in Path(env["TMPDIR"]).iterdir() if p.name.startswith(PREFIX))


def test_a_killed_servers_import_temporaries_are_removed_at_its_next_start(
        environment: dict[str, str], key: str) -> None:
    # A live process's folder (this test's) is never touched by another process's start.
    live = Path(environment["TMPDIR"]) / f"{PREFIX}{os.getpid()}-live"
    live.mkdir()
    server = Server(environment)
    with server.connect() as conn:
        half_an_import(conn, key)
        wait_until(lambda: len(temporaries(environment)) == 2, timeout_s=SERVER_START_S,
                   what="the server to write the body to a temporary folder")
        server.process.kill()  # SIGKILL: nothing of the server runs to clean up
        server.process.wait(timeout=bound(PROCESS_EXIT_S))
    killed = [name for name in temporaries(environment) if name != live.name]
    assert killed and killed[0].startswith(f"{PREFIX}{server.process.pid}-")
    assert any((Path(environment["TMPDIR"]) / killed[0]).iterdir())  # the half body
    again = Server(environment)
    try:
        assert temporaries(environment) == [live.name]
    finally:
        again.process.send_signal(signal.SIGINT)
        again.output()


def test_a_signing_key_others_may_read_stops_the_server_in_one_line(
        environment: dict[str, str], key: str) -> None:
    signing_key = Path(environment["STASH_HOME"]) / "signing.key"
    signing_key.write_text("a" * 64 + "\n")
    signing_key.chmod(0o644)
    result = cli(environment, "api", "--port", str(free_port()))
    assert result.returncode == 2
    output = (result.stdout + result.stderr).strip()
    assert "Traceback" not in output
    [line] = output.splitlines()
    assert line == (f"error: {signing_key} is readable by other users (mode 0644): run "
                    f"`chmod 600 {signing_key}`")


@pytest.mark.parametrize("interrupts", [1, 2])
def test_ctrl_c_with_a_client_connected_prints_no_traceback(
        environment: dict[str, str], key: str, interrupts: int) -> None:
    """One Ctrl-C: the server stops accepting, gives the request in progress the shutdown timeout
    (1 s here), answers it 503 and ends; a second Ctrl-C ends it at once. Either way the
    output holds no traceback and the command ends with 130, as a program stopped by Ctrl-C."""
    server = Server(environment)
    with server.connect() as conn:
        half_an_import(conn, key)
        wait_until(lambda: temporaries(environment), timeout_s=SERVER_START_S,
                   what="the request to be in progress")
        server.process.send_signal(signal.SIGINT)
        before = ""
        if interrupts == 2:
            while "Shutting down" not in before:  # the first one has begun the shutdown
                line = server.process.stdout.readline()
                assert line, before
                before += line
            server.process.send_signal(signal.SIGINT)
        output = before + server.output()
        conn.settimeout(bound(PROCESS_EXIT_S))
        answer = conn.recv(65536)
    assert server.process.returncode == 130, output
    assert "Traceback" not in output and "Exception" not in output, output
    assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
    assert b"shutting down" in answer
    assert temporaries(environment) == []
