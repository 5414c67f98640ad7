"""A deployment's processes on one host for a test: the code server (`stash-pipeline code-server`)
and `dagster-daemon` on the test's instance and store, each in a process group of its own (ended
by the test, by its id); and the release's background scoring they work on, its worker held at a
gate."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from stash_pipeline.cli.code_server import LOCATION_NAME
from stash_pipeline.cli.dev import PROJECT_ROOT
from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, SERVER_START_S, bound, wait_until

BIN = Path(sys.executable).parent
HEALTH_CHECK = PROJECT_ROOT / "deploy" / "healthcheck-code-server.sh"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def health_check(port: int) -> subprocess.CompletedProcess:
    """deploy/healthcheck-code-server.sh on a port of this host, as a container's health check
    runs it (the virtualenv's `stash-pipeline` on the PATH, as in the image)."""
    environ = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run([str(HEALTH_CHECK), "127.0.0.1", str(port)], env=environ,
                          capture_output=True, text=True, timeout=bound(PROCESS_EXIT_S))


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


@contextmanager
def release_scoring(home: Path, store, monkeypatch: pytest.MonkeyPatch, checkpoint: Path,
                    traces: int) -> Iterator[Deployment]:
    """The release r1 (``checkpoint``) and ``traces`` of ana's traces pending for it, in
    background chunks of 2; the worker behind a gate (its Python waits for the file
    ``deployment.gate``, so "running" lasts until the test says); a code server and a daemon on
    the packaged local instance (``$STASH_HOME/dagster``)."""
    from stash_pipeline.objects import object_store_from_env
    from stash_pipeline.objects.keys import shared_evaluator_checkpoint_key
    from stash_pipeline.store import Release

    gate, python = home / "gate", home / "gated-python"
    python.write_text(f'#!/bin/sh\nwhile [ ! -e "{gate}" ]; do sleep 0.1; done\n'
                      f'exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    monkeypatch.setenv("DAGSTER_HOME", str(home / "stash" / "dagster"))
    monkeypatch.setenv("STASH_SCORING_BATCH", "2")
    monkeypatch.setenv("RM_WORKER_PYTHON", str(python))
    store.import_traces(agentprocessbench_records(traces))
    uri = object_store_from_env().put_file(shared_evaluator_checkpoint_key("r1"), checkpoint)
    store.save_release(Release("r1", uri, {"passed": True},
                               {"training_traces": {}, "benchmark_traces": {}}))
    running = Deployment(home, {**os.environ, "PYTHONUNBUFFERED": "1"})
    running.gate = gate
    try:
        running.start_code_server()
        running.start_daemon()
        yield running
    finally:
        running.stop_all()
