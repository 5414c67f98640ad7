"""The seed's two curl snippets, verbatim but for the host, key and ids, against
`stash-pipeline api` started as a command (curl and jq in a subprocess). The account and the
traces it needs are made by the CLI in the test's own process (a process each cost 1-3 s of
imports; the CLI's commands as processes are tested in cli/)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from stash_pipeline.cli import main
from stash_pipeline.objects import object_store_from_env, reward_model_checkpoint_key
from stash_pipeline.store import Store, schema
from stash_pipeline_tests.support.api_helpers import checkpoint_archive, loopback_socket
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, SERVER_START_S, bound, wait_until

SAMPLES = Path(__file__).resolve().parents[2] / "stash_pipeline" / "samples"
CLI = [sys.executable, "-m", "stash_pipeline"]

# "Start a personal training job", with <trace_id> filled in.
CREATE = """curl -s "$STASH_URL/api/v1/rm/reward-models" \\
  -H "Authorization: Bearer $STASH_API_KEY" \\
  -H "Content-Type: application/json" \\
  -d '{
    "name": "refund-policy-v2",
    "trace_ids": ["<trace_id>"],
    "epochs": 2
  }'
"""
# "Downloading the weights", with <id> filled in.
DOWNLOAD = """set -euo pipefail
reward_weights_url="$(curl -fsS "$STASH_URL/api/v1/rm/reward-models/<id>/weights" -H "Authorization: Bearer $STASH_API_KEY" | jq -er '.url')"
curl -fL "$reward_weights_url" --output reward-model.tar.gz
tar xzf reward-model.tar.gz
"""  # noqa: E501 - the seed's command, as a user pastes it

pytestmark = pytest.mark.skipif(not (shutil.which("curl") and shutil.which("jq")),
                                reason="the seed's snippets need curl and jq")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def environment(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                use_stash_home) -> dict[str, str]:
    """This test's STASH_HOME (and database), set for the commands run here and returned as the
    environment of the processes it starts; no other deployment setting leaks in."""
    for key in list(os.environ):
        if key.startswith(("S3_", "STASH_", "DATABASE_URL")) and not key.startswith("STASH_TEST"):
            monkeypatch.delenv(key)
    use_stash_home(tmp_path / "home")
    if request.param == "postgresql":
        store = request.getfixturevalue("postgres_store")
        with store.transaction() as connection:  # start from empty tables
            for table in reversed(schema.metadata.sorted_tables):
                connection.execute(table.delete())
        monkeypatch.setenv("DATABASE_URL", store.url)
    return dict(os.environ)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """A CLI command run here; it must succeed, and its output is returned."""
    capsys.readouterr()
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_the_seeds_curl_snippets_work_verbatim(environment: dict[str, str], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    env = environment
    account = json.loads(cli(capsys, "accounts", "create", "--name", "ana", "--json"))
    assert set(account) >= {"id", "api_key"}
    cli(capsys, "import", str(SAMPLES), "--owner", account["id"])
    sock = loopback_socket()
    port = sock.getsockname()[1]
    sock.close()
    server = subprocess.Popen([*CLI, "api", "--port", str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(port, server)
        shell_env = {**env, "STASH_URL": url, "STASH_API_KEY": account["api_key"]}
        trace_id = httpx.get(f"{url}/api/v1/traces",
                             headers={"Authorization": f"Bearer {account['api_key']}"}
                             ).json()["traces"][0]["id"]
        created = subprocess.run(["bash", "-c", CREATE.replace("<trace_id>", trace_id)],
                                 env=shell_env, capture_output=True, text=True, check=True)
        model = json.loads(created.stdout)
        assert (model["status"], model["epochs"], model["trace_ids"]) == \
            ("queued", 2, [trace_id])

        # The pipeline's part, done here: the model succeeds with a checkpoint in the object store.
        store = Store(env.get("DATABASE_URL") or f"sqlite:///{tmp_path / 'home' / 'stash.db'}")
        objects = object_store_from_env(env)
        archive = tmp_path / "archive.tar.gz"
        archive.write_bytes(checkpoint_archive())
        attempt = store.mark_running(model["id"])
        uri = objects.put_file(reward_model_checkpoint_key(model["id"], attempt), archive)
        store.mark_succeeded(model["id"], metrics={"train_pairs": 2}, checkpoint_uri=uri)
        store.dispose()

        work = tmp_path / "download"
        work.mkdir()
        subprocess.run(["bash", "-c", DOWNLOAD.replace("<id>", model["id"])], env=shell_env,
                       cwd=work, capture_output=True, text=True, check=True)
        assert (work / "reward-model" / "config.json").read_text() == "{}"
    finally:
        server.terminate()
        server.wait(timeout=bound(PROCESS_EXIT_S))


def _wait_until_up(port: int, server: subprocess.Popen) -> None:
    """Until the server accepts connections: a bare connect per poll (an HTTP client per poll
    would build an SSL context each time, CPU the starting server needs)."""
    def accepting() -> bool:
        if server.poll() is not None:
            raise AssertionError(f"stash-pipeline api exited: {server.stdout.read()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    wait_until(accepting, timeout_s=SERVER_START_S, what="stash-pipeline api to accept "
               "connections", interval_s=0.1)
