"""A failed job's reason names no server path, wherever its owner reads it: the API, `rm show` and
the SQL endpoint's `reward_models`, on SQLite and PostgreSQL (issue 22)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from stash_pipeline.api import create_app
from stash_pipeline.cli import main
from stash_pipeline.core.failures import reason_line
from stash_pipeline.objects import LocalObjectStore, UrlSigner
from stash_pipeline.services import accounts
from stash_pipeline_tests.support.cli_helpers import HOTPOTQA, cli_store, run_json  # noqa: F401 - a fixture


def test_a_failed_jobs_error_shows_no_server_path(cli_store, tmp_path, monkeypatch, capsys):
    from stash_pipeline_tests.support.api_helpers import SETTINGS, Api, loopback_socket, serve

    scratch, models = tmp_path / "scratch", tmp_path / "models"
    monkeypatch.setenv("RM_ARTIFACT_DIR", str(scratch))
    monkeypatch.setenv("STASH_EXTRACTION", "off")
    stash_home = Path(os.environ["STASH_HOME"])  # the suite's own, outside tmp_path
    broken = models / "broken"  # a base model the worker cannot load: its error names the path
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{not json")
    account, key = accounts.create(cli_store, "ana")
    sample = tmp_path / "hotpot.jsonl"
    sample.write_text("".join(HOTPOTQA.open().readlines()[:6]))
    run_json(capsys, "import", str(sample), "--owner", account.id)

    code = main(["rm", "create", "--owner", account.id, "--name", "m", "--all-traces",
                 "--base-model", str(broken), "--wait", "--json"])
    created = run_json_of(capsys.readouterr().out)
    assert code == 1 and created["status"] == "failed", created
    [job_log] = scratch.rglob("worker.log")
    assert str(broken) in job_log.read_text()  # the operator's log keeps the paths

    assert main(["rm", "show", created["id"], "--owner", account.id]) == 1  # 1: a failed model
    shown = capsys.readouterr().out
    listed = run_json(capsys, "rm", "list", "--owner", account.id)["reward_models"][0]["error"]
    sock = loopback_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    objects = LocalObjectStore(tmp_path / "objects", api_url=url, signer=UrlSigner(b"k" * 32))
    for _ in serve(create_app(cli_store, objects, SETTINGS), sock):
        client = Api(url, cli_store, objects).client(key)
        through_api = client.get(f"/api/v1/rm/reward-models/{created['id']}").json()["error"]
        answer = client.post("/api/v1/sql", json={"sql": "SELECT error FROM reward_models"})
        assert answer.status_code == 200, answer.text
        [[through_sql]] = answer.json()["rows"]

    texts = {"rm create --wait": created["error"], "rm show": shown, "rm list": listed,
             "API": through_api, "SQL": through_sql}
    server_paths = (tmp_path, scratch, stash_home, models, Path(sys.prefix),
                    Path(__file__).resolve().parents[2])
    for where, text in texts.items():
        assert "job failed in phase" in text and ".../broken" in text, (where, text)
        leaked = [str(p) for p in server_paths if str(p) in text]
        assert not leaked, (where, leaked, text)
    assert through_api == through_sql == listed == created["error"]


def run_json_of(out: str) -> dict:
    import json

    return json.loads(out.strip().splitlines()[-1])


STOPS_AT_ONCE = ("#!/bin/sh\n"
                 "echo 'Traceback (most recent call last):' >&2\n"
                 "echo \"ModuleNotFoundError: No module named 'stash_pipeline'\" >&2\n"
                 "exit 1\n")


@pytest.mark.worker_process
@pytest.mark.parametrize("python, reason", [
    ("stops-at-once", "ModuleNotFoundError: No module named 'stash_pipeline'"),
    ("missing", "the worker did not start: .../missing -m stash_pipeline.worker "
                "(RM_WORKER_PYTHON): No such file or directory"),
])
def test_a_worker_that_never_started_leaves_its_real_reason(python, reason, tmp_path, monkeypatch,
                                                           capsys, use_stash_home):
    """An interpreter without the project (it stops before it writes worker.log, saying why on
    stderr) or no interpreter at all: the model's reason says so, not `worker.log missing`."""
    use_stash_home(tmp_path / "stash")
    monkeypatch.setenv("STASH_EXTRACTION", "off")
    stand_in = tmp_path / python
    if python == "stops-at-once":
        stand_in.write_text(STOPS_AT_ONCE)
        stand_in.chmod(0o755)
    monkeypatch.setenv("RM_WORKER_PYTHON", str(stand_in))
    sample = tmp_path / "hotpot.jsonl"
    sample.write_text("".join(HOTPOTQA.open().readlines()[:6]))
    run_json(capsys, "import", str(sample))

    code = main(["rm", "create", "--name", "m", "--all-traces", "--base-model", "Qwen/Qwen3-0.6B",
                 "--wait", "--json"])
    out, err = capsys.readouterr()
    model = run_json_of(out)
    assert code == 1 and model["status"] == "failed"
    assert reason_line(model["error"]) == reason, model["error"]
    # The run's failure in one line, its reason first (no stack trace, no Dagster event stream).
    assert f'  error: Execution of step "personal_checkpoint" failed: {reason}' in err.splitlines()
    assert "Stack Trace" not in err and "STEP_FAILURE" not in err and "[pipes]" not in err
    assert "worker.log missing" not in model["error"] and str(tmp_path) not in model["error"]
