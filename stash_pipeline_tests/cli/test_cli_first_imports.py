"""Parallel first imports into a fresh STASH_HOME create the Dagster instance once (issue 22)."""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from stash_pipeline.cli import main

from test_cli_rm import HOTPOTQA

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
IMPORTS = 8


def test_eight_parallel_first_imports_then_create_wait_succeeds(tmp_path, monkeypatch, capsys,
                                                                tiny_base_model):
    home = tmp_path / "stash"
    monkeypatch.setenv("STASH_HOME", str(home))
    monkeypatch.setenv("STASH_EXTRACTION", "off")
    for name in ("DATABASE_URL", "DAGSTER_HOME", "S3_BUCKET", "RM_ARTIFACT_DIR", "STASH_API_URL"):
        monkeypatch.delenv(name, raising=False)
    lines = list(itertools.islice(HOTPOTQA.open(), IMPORTS))
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    commands = []
    for index, line in enumerate(lines):
        sample = tmp_path / f"sample-{index}.jsonl"
        sample.write_text(line)
        commands.append(subprocess.Popen(
            [sys.executable, "-m", "stash_pipeline", "import", str(sample), "--json"], cwd=REPO,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for command in commands:
        out, err = command.communicate(timeout=600)
        assert command.returncode == 0, err
        assert "warning" not in err.lower() and "Traceback" not in err, err
        assert json.loads(out.strip().splitlines()[-1])["traces"] == 1
    with sqlite3.connect(home / "dagster" / "schedules" / "schedules.db") as db:
        assert db.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)

    code = main(["rm", "create", "--name", "after", "--all-traces", "--base-model",
                 str(tiny_base_model), "--wait", "--json"])
    model = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and model["status"] == "succeeded", model["error"]
    assert model["metrics"]["train_pairs"] > 0
