"""Ids that reveal nothing (issue 51): Score again requests and saved filters are named by random
UUIDs, so no account can count another's; one made before migration 0012 (an integer id) is still
found by that integer wherever it was named: the API's routes, the viewer's URLs and forms, and
the tag of its scoring run (both databases, over real HTTP)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from stash_pipeline.store import schema
from stash_pipeline_tests.support.api_helpers import Api
from stash_pipeline_tests.support.viewer_helpers import World, csrf, login, scored_world

SCORE = "/api/v1/traces/score"
FILTERS = "/api/v1/saved-filters"


@pytest.fixture
def world(api: Api, tmp_path: Path) -> World:
    return scored_world(api, tmp_path)


def _made_before_uuids(api: Api, table: sa.Table, legacy_id: int, **values) -> str:
    """A row as migration 0012 left a record made before it: a fresh UUID, its integer kept."""
    key = str(uuid.uuid4())
    with api.store.transaction() as connection:
        connection.execute(table.insert().values(id=key, legacy_id=legacy_id, **values))
    return key


def test_new_ids_are_random_uuids(api: Api, world: World) -> None:
    alice = api.client(world.alice_key)
    asked = [alice.post(SCORE, json={"trace_ids": ["trace-a"]}).json()["request_id"]
             for _ in range(2)]
    saved = alice.post(FILTERS, json={"name": "orders", "match": {"tool": "get_order"}}).json()
    for key in (*asked, saved["id"]):
        assert uuid.UUID(key).version == 4 and str(uuid.UUID(key)) == key
    assert asked[0] != asked[1]
    assert alice.get(f"{SCORE}/{asked[0].upper()}").json()["request_id"] == asked[0]
    assert [r.legacy_id for r in api.store.scoring_requests()] == [None, None]
    for path in (f"{SCORE}/1", f"{SCORE}/{uuid.uuid4()}"):  # no integer names a new one
        assert alice.get(path).status_code == 404
    for bad in ("0", "2147483648", "-1", "1.5", "x" * 36, f"{asked[0]}0"):
        refused = alice.get(f"{SCORE}/{bad}")
        assert refused.status_code == 422 and "UUID" in str(refused.json()), bad
        assert alice.delete(f"{FILTERS}/{bad}").status_code == 422, bad


def test_a_request_made_before_uuids_keeps_its_integer_id(api: Api, world: World) -> None:
    from stash_pipeline_tests.support.viewer_helpers import scoring_run

    owner = api.store.get_trace("trace-a").owner
    key = _made_before_uuids(api, schema.scoring_requests, 7, owner=owner, evaluator="r1",
                             traces={"trace-a": 1}, actions=False)
    alice, bob = api.client(world.alice_key), api.client(world.bob_key)
    by_integer, by_uuid = alice.get(f"{SCORE}/7"), alice.get(f"{SCORE}/{key}")
    assert by_integer.status_code == by_uuid.status_code == 200
    assert by_integer.json() == by_uuid.json() and by_uuid.json()["request_id"] == key
    assert bob.get(f"{SCORE}/7").status_code == bob.get(f"{SCORE}/{key}").status_code == 404
    # Its run, asked for before the migration, carries the integer in its tag: still found.
    scoring_run("run-of-request-7", "7")
    assert alice.get(f"{SCORE}/{key}").json()["run_id"] == "run-of-request-7"
    # The viewer's URLs from before (``?requests=7``) follow it as they did.
    client = login(api, world.alice_key)
    page = client.get("/ui/traces/trace-a?requests=7").text
    assert "Score again request 7: Waiting for the worker" in page
    state = client.get("/ui/score-requests/progress?requests=7,{key}".format(key=key))
    assert state.status_code == 200
    assert [r["status"] for r in state.json()["requests"]] == ["queued", "queued"]
    assert login(api, world.bob_key).get("/ui/score-requests/progress?requests=7"
                                         ).status_code == 404


def test_a_filter_saved_before_uuids_keeps_its_integer_id(api: Api, world: World) -> None:
    owner = api.store.get_trace("trace-a").owner
    for legacy_id, name in ((8, "old orders"), (9, "old hellos")):
        _made_before_uuids(api, schema.saved_filters, legacy_id, owner=owner, name=name,
                           params={"tool": "get_order"})
    assert api.client(world.bob_key).delete(f"{FILTERS}/8").status_code == 404
    alice = api.client(world.alice_key)
    assert alice.delete(f"{FILTERS}/8").status_code == 204
    assert alice.delete(f"{FILTERS}/8").status_code == 404
    client = login(api, world.alice_key)
    token = csrf(client.get("/ui/traces").text)
    assert client.post("/ui/saved-filters/9/remove", data={"csrf": token}).status_code == 303
    assert api.store.saved_filters(owner) == []
