"""`stash-pipeline code-server`: the code location's gRPC server, which SIGTERM stops, and its
health check (deploy/healthcheck-code-server.sh).

Started with SIGINT ignored, as a shell's background job or some service managers start it:
plain `dagster api grpc` then ignores SIGTERM too (Dagster gives SIGTERM SIGINT's handler) and an
old code server keeps serving beside its replacement.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from dagster._grpc.client import DagsterGrpcClient
from dagster._serdes import deserialize_value

from stash_pipeline.cli.code_server import DEFINITIONS_MODULE
from stash_pipeline_tests.support.deployment import free_port, health_check
from stash_pipeline_tests.support.waiting import SERVER_START_S, wait_until

CLI = Path(sys.executable).with_name("stash-pipeline")


def serves(client: DagsterGrpcClient) -> bool:
    try:
        client.ping("ready")
        return True
    except Exception:  # noqa: BLE001 - not listening yet: any failure to connect means "not yet"
        return False


def test_sigterm_stops_a_code_server_started_with_sigint_ignored(tmp_path):
    port = free_port()
    log = (tmp_path / "code-server.log").open("wb")
    server = subprocess.Popen(
        [str(CLI), "code-server", "--host", "127.0.0.1", "--port", str(port)], cwd=tmp_path,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN), start_new_session=True,
        stdout=log, stderr=subprocess.STDOUT)
    try:
        client = DagsterGrpcClient(port=port, host="127.0.0.1")
        wait_until(lambda: serves(client) or server.poll() is not None,
                   timeout_s=SERVER_START_S, what="the code server to serve")
        assert server.poll() is None, (tmp_path / "code-server.log").read_text()
        # It serves the project's definitions, with this interpreter as its runs' command.
        served = deserialize_value(client.list_repositories())
        assert [s.attribute for s in served.repository_symbols] == ["defs"]
        assert DEFINITIONS_MODULE in repr(served.repository_code_pointer_dict)
        assert served.entry_point == [sys.executable, "-m", "dagster"]
        healthy = health_check(port)
        assert healthy.returncode == 0, healthy.stderr
        assert healthy.stdout.strip() == (f"the code server at 127.0.0.1:{port} serves the "
                                          f"definitions (from {DEFINITIONS_MODULE} import defs)")
        server.send_signal(signal.SIGTERM)
        wait_until(lambda: server.poll() is not None, timeout_s=SERVER_START_S,
                   what="the code server to stop on SIGTERM", interval_s=0.1)
        assert server.returncode == 0
        assert not serves(client)
        gone = health_check(port)
        assert gone.returncode == 1
        assert gone.stderr.startswith(f"no answer from a code server at 127.0.0.1:{port} "), gone
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()


def test_a_port_that_listens_but_answers_nothing_is_unhealthy():
    """A server whose port accepts connections but which answers nothing (what a code server
    left by a second SIGTERM did) fails the health check once its deadline passes."""
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen()
        accepted = []
        stop = threading.Event()

        def accept() -> None:
            mute.settimeout(0.2)
            while not stop.is_set():
                try:
                    accepted.append(mute.accept()[0])  # held open, never answered
                except OSError:
                    continue

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        try:
            result = health_check(mute.getsockname()[1])
        finally:
            stop.set()
            thread.join()
            for connection in accepted:
                connection.close()
    assert result.returncode == 1
    assert "no answer from a code server at 127.0.0.1:" in result.stderr
    assert accepted, "the health check never connected"
