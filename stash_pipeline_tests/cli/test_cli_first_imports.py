"""Parallel first imports into a fresh STASH_HOME create the Dagster instance once (issue 22)."""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
from pathlib import Path

import pytest

from stash_pipeline.cli import main
from stash_pipeline_tests.support.cli_helpers import HOTPOTQA
from stash_pipeline_tests.support.forked_cli import Command, run_at_once

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
IMPORTS = 8


def test_eight_parallel_first_imports_then_create_wait_succeeds(tmp_path, monkeypatch, capsys,
                                                                pipeline_base_model):
    home = tmp_path / "stash"
    monkeypatch.setenv("STASH_HOME", str(home))
    monkeypatch.setenv("STASH_EXTRACTION", "off")
    for name in ("DATABASE_URL", "DAGSTER_HOME", "S3_BUCKET", "RM_ARTIFACT_DIR", "STASH_API_URL"):
        monkeypatch.delenv(name, raising=False)
    lines = list(itertools.islice(HOTPOTQA.open(), IMPORTS))
    commands = []
    for index, line in enumerate(lines):
        sample = tmp_path / f"sample-{index}.jsonl"
        sample.write_text(line)
        commands.append(Command(["import", str(sample), "--json"], dict(os.environ), REPO))
    results, imports_err = run_at_once(commands, tmp_path / "commands")
    assert "warning" not in imports_err.lower(), imports_err
    for result in results:
        assert result.code == 0, result.err
        assert "warning" not in result.err.lower() and "Traceback" not in result.err, result.err
        assert json.loads(result.out.strip().splitlines()[-1])["traces"] == 1
    with sqlite3.connect(home / "dagster" / "schedules" / "schedules.db") as db:
        assert db.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)

    code = main(["rm", "create", "--name", "after", "--all-traces", "--base-model",
                 str(pipeline_base_model), "--wait", "--json"])
    model = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and model["status"] == "succeeded", model["error"]
    assert model["metrics"]["train_pairs"] > 0
