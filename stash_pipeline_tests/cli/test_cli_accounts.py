"""`stash-pipeline accounts`: keys printed once and stored hashed, pre-rollout accounts, new
keys."""

from __future__ import annotations

import json

import pytest

from stash_pipeline.cli import main
from stash_pipeline.services import accounts
from stash_pipeline.store import Store
from stash_pipeline_tests.support.cli_helpers import last_json


@pytest.fixture
def home(tmp_path, monkeypatch, use_stash_home):
    use_stash_home(tmp_path / "stash")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return tmp_path / "stash"


def test_create_prints_the_key_once_and_stores_only_its_hash(home, capsys) -> None:
    assert main(["accounts", "create", "--name", "Ana", "--json"]) == 0
    created = last_json(capsys)
    assert created["api_key"].startswith("stash_") and created["reward_models_enabled"] is True
    store = Store.from_env()
    account = store.get_account(created["id"])
    assert account.name == "Ana" and account.api_key_hash == accounts.hash_key(created["api_key"])
    assert created["api_key"].encode() not in (home / "stash.db").read_bytes()
    assert accounts.authenticate(store, created["api_key"]).id == created["id"]
    assert accounts.authenticate(store, created["api_key"] + "x") is None
    assert main(["accounts", "list", "--json"]) == 0
    assert "api_key" not in json.dumps(last_json(capsys)).replace("has_api_key", "")


def test_before_rollout_and_taken_ids(home, capsys) -> None:
    assert main(["accounts", "create", "--name", "Old", "--id", "old", "--before-rollout",
                 "--json"]) == 0
    assert last_json(capsys)["reward_models_enabled"] is False
    assert main(["accounts", "create", "--name", "Again", "--id", "old"]) == 2
    assert "already exists" in capsys.readouterr().err


def test_a_new_key_replaces_the_old_one(home, capsys) -> None:
    assert main(["accounts", "create", "--name", "Ana", "--id", "ana", "--json"]) == 0
    old = last_json(capsys)["api_key"]
    assert main(["accounts", "key", "ana", "--json"]) == 0
    new = last_json(capsys)["api_key"]
    store = Store.from_env()
    assert accounts.authenticate(store, old) is None
    assert accounts.authenticate(store, new).id == "ana"
    assert main(["accounts", "key", "nobody"]) == 2
