"""Helpers of the CLI suite: a command's last JSON line, and the CLI on the `store` fixture."""

from __future__ import annotations

import json

import pytest

from stash_pipeline.cli import main


@pytest.fixture
def cli_store(store, monkeypatch):
    """The parametrised store (SQLite and PostgreSQL) as the database every command opens."""
    monkeypatch.setenv("DATABASE_URL", str(store.url))
    return store


def run_json(capsys, *args: str) -> dict:
    """Run a command with --json; it must succeed, and its last line is returned parsed."""
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])
