"""Helpers of the CLI suite: a command's last JSON line, the CLI on the `store` fixture, and a
fresh `STASH_HOME` with six AgentProcessBench traces imported (`home`)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from stash_pipeline.cli import main
from stash_pipeline_tests.support.tiny_models import SHARED_DATA


@pytest.fixture
def cli_store(store, monkeypatch):
    """The parametrised store (SQLite and PostgreSQL) as the database every command opens."""
    monkeypatch.setenv("DATABASE_URL", str(store.url))
    return store


def run_json(capsys, *args: str) -> dict:
    """Run a command with --json; it must succeed, and its last line is returned parsed."""
    assert main([*args, "--json"]) == 0
    return last_json(capsys)


HOTPOTQA = SHARED_DATA / "agentprocessbench" / "hotpotqa.jsonl"


@pytest.fixture
def home(tmp_path, monkeypatch, use_stash_home) -> Path:
    use_stash_home(tmp_path / "stash")
    monkeypatch.setenv("STASH_EXTRACTION", "off")
    for name in ("DATABASE_URL", "DAGSTER_HOME", "S3_BUCKET", "RM_ARTIFACT_DIR", "STASH_API_URL"):
        monkeypatch.delenv(name, raising=False)
    sample = tmp_path / "hotpot.jsonl"
    sample.write_text("".join(itertools.islice(HOTPOTQA.open(), 6)))
    assert main(["import", str(sample), "--json"]) == 0
    return tmp_path / "stash"


def last_json(capsys) -> dict:
    """A command's last line of output, parsed: its JSON."""
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])
