"""Reviews that notice each other (issue 51.6): a verdict, a status or an assignment carries the
item's review version, and of concurrent ones made at the same version one wins and every other
answers 409 with the item's state now. Real concurrent HTTP requests, on both databases."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from stash_pipeline.core.feedback import ReviewedComparison, feedback_id
from stash_pipeline_tests.support.api_helpers import Api
from stash_pipeline_tests.support.viewer_helpers import World, scored_world

RACERS = 24  # concurrent requests at one version


@pytest.fixture
def world(api: Api, tmp_path: Path) -> World:
    return scored_world(api, tmp_path)


def _race(api: Api, key: str, requests: list[tuple[str, dict]]) -> list[httpx.Response]:
    """Every request at once: each thread its own client, all released by one barrier."""
    start = threading.Barrier(len(requests))
    clients = [api.client(key) for _ in requests]

    def post(n: int) -> httpx.Response:
        path, body = requests[n]
        start.wait()
        return clients[n].post(path, json=body)

    try:
        with ThreadPoolExecutor(len(requests)) as pool:
            return list(pool.map(post, range(len(requests))))
    finally:
        for client in clients:
            client.close()


def _pending_comparison(api: Api) -> str:
    comparison = ReviewedComparison(feedback_id("comparison", "trace-a", "trace-b", "ana"),
                                    "trace-a", "trace-b", status="pending", author="ana")
    api.store.add_feedback([comparison], owner=api.store.get_trace("trace-a").owner)
    return comparison.id


def test_concurrent_verdicts_on_one_comparison_one_wins_the_rest_409(api: Api,
                                                                     world: World) -> None:
    alice = api.client(world.alice_key)
    comparison_id = _pending_comparison(api)
    [item] = alice.get("/api/v1/review/queue", params={"kind": "comparison"}).json()["items"]
    version = item["version"]
    assert version == 0
    answers = _race(api, world.alice_key, [
        (f"/api/v1/comparisons/{comparison_id}/review",
         {"reviewer": f"reviewer-{n}", "status": "approved" if n % 2 else "rejected",
          "version": version}) for n in range(RACERS)])
    codes = sorted(a.status_code for a in answers)
    assert codes == [200] + [409] * (RACERS - 1), [a.json() for a in answers][:2]
    [won] = [a.json() for a in answers if a.status_code == 200]
    assert won["version"] == version + 1
    stored = api.store.comparisons([comparison_id])[comparison_id]
    assert (stored["reviewer"], stored["status"]) == (won["reviewer"], won["status"])
    for refused in (a.json() for a in answers if a.status_code == 409):
        [current] = refused["current"]
        assert (current["kind"], current["id"], current["version"]) == (
            "comparison", comparison_id, version + 1)
        assert (current["verdict"], current["verdict_reviewer"]) == (won["status"],
                                                                     won["reviewer"])
        assert "changed by someone else" in refused["detail"]
    # A verdict at the version now is taken; one without a version replaces whatever is there.
    again = alice.post(f"/api/v1/comparisons/{comparison_id}/review",
                       json={"reviewer": "zoe", "version": version + 1})
    assert again.status_code == 200 and again.json()["version"] == version + 2
    assert alice.post(f"/api/v1/comparisons/{comparison_id}/review",
                      json={"reviewer": "yan"}).json()["version"] == version + 3


def test_concurrent_assignments_and_statuses_one_wins_the_rest_409(api: Api,
                                                                   world: World) -> None:
    alice = api.client(world.alice_key)
    answers = _race(api, world.alice_key, [
        ("/api/v1/review/assign",
         {"items": [{"kind": "trace", "id": "trace-c", "version": 0}], "assignee": f"r{n}"})
        for n in range(RACERS // 2)] + [
        ("/api/v1/review/items",
         {"items": [{"kind": "trace", "id": "trace-c", "version": 0}], "status": "skipped"})
        for _ in range(RACERS // 2)])
    assert sorted(a.status_code for a in answers) == [200] + [409] * (RACERS - 1)
    [won] = [a.json() for a in answers if a.status_code == 200]
    assert won["versions"] == [{"kind": "trace", "id": "trace-c", "version": 1}]
    queue = {i["id"]: i for i in alice.get("/api/v1/review/queue").json()["items"]}
    state = queue["trace-c"]
    assert state["version"] == 1
    if "assignee" in won:  # an assignment won: nobody skipped it
        assert (state["assignee"], state["status"]) == (won["assignee"], "pending")
    else:
        assert (state["assignee"], state["status"]) == (None, "skipped")
    for refused in (a.json() for a in answers if a.status_code == 409):
        assert refused["current"] == [{"kind": "trace", "id": "trace-c", "version": 1,
                                       "status": state["status"],
                                       "assignee": state["assignee"],
                                       "reviewer": refused["current"][0]["reviewer"]}]


def test_a_stale_version_changes_nothing_of_the_whole_change(api: Api, world: World) -> None:
    alice = api.client(world.alice_key)
    assert alice.post("/api/v1/review/assign", json={
        "items": [{"kind": "trace", "id": "trace-b"}], "assignee": "bo"}).status_code == 200
    stale = alice.post("/api/v1/review/items", json={
        "items": [{"kind": "trace", "id": "trace-a", "version": 0},
                  {"kind": "trace", "id": "trace-b", "version": 0}], "status": "reviewed"})
    assert stale.status_code == 409
    assert stale.json()["current"] == [{"kind": "trace", "id": "trace-b", "version": 1,
                                        "status": "pending", "assignee": "bo",
                                        "reviewer": None}]
    assert "assigned to bo" in stale.json()["detail"]
    queue = {i["id"]: i for i in alice.get("/api/v1/review/queue").json()["items"]}
    assert set(queue) == {"trace-a", "trace-b", "trace-c"}  # trace-a was not reviewed either
    assert queue["trace-a"]["version"] == 0
    bad = alice.post("/api/v1/review/items", json={
        "items": [{"kind": "trace", "id": "trace-a", "version": -1}], "status": "reviewed"})
    assert bad.status_code == 422
