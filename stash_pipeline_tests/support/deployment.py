"""A deployment's processes on one host for a test: the code server (`stash-pipeline code-server`)
and `dagster-daemon` on the test's instance and store, each in a process group of its own (ended
by the test, by its id)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import yaml

from stash_pipeline.cli.code_server import LOCATION_NAME
from stash_pipeline.cli.dev import PROJECT_ROOT
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, SERVER_START_S, bound, wait_until

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


class Deployment:
    """The processes, by name; the workspace (deploy/workspace.yaml's shape) points the daemon at
    the code server's port, which stays the same when the code server is replaced."""

    def __init__(self, home: Path, environ: dict[str, str]):
        self.home, self.environ, self.port = home, environ, free_port()
        self.workspace = home / "workspace.yaml"
        self.workspace.write_text(yaml.safe_dump({"load_from": [{"grpc_server": {
            "host": "127.0.0.1", "port": self.port, "location_name": LOCATION_NAME}}]}))
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, name: str, command: list[str]) -> subprocess.Popen:
        log = (self.home / f"{name}.log").open("a")
        self.processes[name] = subprocess.Popen(
            command, cwd=PROJECT_ROOT, env=self.environ, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        return self.processes[name]

    def start_code_server(self) -> subprocess.Popen:
        """`stash-pipeline code-server` on the deployment's port, once it listens."""
        server = self.start("code-server", [str(BIN / "stash-pipeline"), "code-server",
                                            "--host", "127.0.0.1", "--port", str(self.port)])
        wait_until(lambda: listening(self.port) or server.poll() is not None,
                   timeout_s=SERVER_START_S, what="the code server to listen")
        assert server.poll() is None, self.log("code-server")
        return server

    def start_daemon(self) -> subprocess.Popen:
        return self.start("daemon", [str(BIN / "dagster-daemon"), "run", "-w",
                                     str(self.workspace)])

    def stop(self, name: str) -> None:
        process = self.processes.pop(name)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=bound(PROCESS_EXIT_S))

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.stop(name)

    def log(self, name: str) -> str:
        return (self.home / f"{name}.log").read_text()
