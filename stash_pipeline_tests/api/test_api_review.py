"""The review queue, search, bulk actions and saved filters over real HTTP (both databases)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from stash_pipeline.core.feedback import ReviewedComparison, feedback_id
from stash_pipeline.importers import read_path
from stash_pipeline_tests.support.api_helpers import Api, trace_object
from stash_pipeline_tests.support.viewer_helpers import RELEASE, TRACES, World, scored_world


@pytest.fixture
def world(api: Api, tmp_path: Path) -> World:
    return scored_world(api, tmp_path)


def test_search_parameters_narrow_the_list(api: Api, world: World) -> None:
    alice = api.client(world.alice_key)
    found = alice.get("/api/v1/traces", params={"q": "HELLO", "tool": "get_order",
                                                "task_id": "t1"}).json()
    assert found["total"] == 3 and found["traces"][0]["preview"] == "hello"
    line = found["traces"][0]
    assert line["min_action_credit"] <= line["mean_action_credit"]
    # The world's credit grows with the trace: trace-c's mean is the only one above 0.5.
    high = alice.get("/api/v1/traces", params={"credit_min": "0.5"}).json()
    assert [t["id"] for t in high["traces"]] == ["trace-c"]
    assert alice.get("/api/v1/traces", params={"q": "no such words"}).json()["total"] == 0
    assert alice.get("/api/v1/traces", params={"outcome": "none"}).json()["total"] == 3
    for params, field in (({"outcome": "won"}, "outcome"), ({"credit_min": "x"}, "credit_min"),
                          ({"created_to": "soon"}, "created_to")):
        bad = alice.get("/api/v1/traces", params=params)
        assert bad.status_code == 422 and bad.json()["field"] == field, params


def test_the_queue_gives_the_next_item_its_focus_and_progress(api: Api, world: World) -> None:
    alice = api.client(world.alice_key)
    first = alice.get("/api/v1/review/next").json()
    assert (first["total"], first["reviewed"], first["pending"]) == (3, 0, 3)
    assert first["release"] == RELEASE and first["model_id"] == world.model_id
    item = first["item"]
    # The release's credit is positive on trace-c and trace-b, the personal model's negative:
    # they disagree there, most on trace-c.
    assert (item["kind"], item["id"], item["reason"]) == ("trace", "trace-c", "disagreement")
    assert item["focus_action"].startswith("trace-c/")
    queue = alice.get("/api/v1/review/queue").json()
    assert [i["id"] for i in queue["items"]] == ["trace-c", "trace-b", "trace-a"]
    assert [o["reason"] for o in queue["order"]][:2] == ["comparison", "disagreement"]
    done = alice.post("/api/v1/review/items", json={
        "items": [{"kind": "trace", "id": "trace-c"}], "status": "reviewed"})
    assert done.status_code == 200 and done.json() == {
        "items": 1, "status": "reviewed",
        "versions": [{"kind": "trace", "id": "trace-c", "version": 1}]}
    skipped = alice.post("/api/v1/review/items", json={
        "items": [{"kind": "trace", "id": "trace-b"}], "status": "skipped"})
    assert skipped.status_code == 200
    after = alice.get("/api/v1/review/next").json()
    assert after["item"]["id"] == "trace-a" and (after["reviewed"], after["total"]) == (1, 3)
    queue = alice.get("/api/v1/review/queue").json()
    assert [(i["id"], i["reason"]) for i in queue["items"]] == [("trace-a", "score"),
                                                                ("trace-b", "skipped")]
    assert queue["items"][-1]["status"] == "skipped"
    assert alice.post("/api/v1/review/items", json={
        "items": [{"kind": "trace", "id": "trace-c"}], "status": "pending"}).status_code == 200
    assert alice.get("/api/v1/review/queue").json()["pending"] == 3


def test_assignment_and_comparisons_filed_by_others(api: Api, world: World) -> None:
    alice = api.client(world.alice_key)
    comparison = ReviewedComparison(feedback_id("comparison", "trace-a", "trace-b", "ana"),
                                    "trace-a", "trace-b", status="pending", author="ana")
    alice_owner = api.store.get_trace("trace-a").owner
    api.store.add_feedback([comparison], owner=alice_owner)
    item = alice.get("/api/v1/review/next").json()["item"]
    assert (item["kind"], item["id"], item["author"]) == ("comparison", comparison.id, "ana")
    # ana herself does not review her own comparison.
    assert alice.get("/api/v1/review/next", params={"reviewer": "ana"}).json()["item"][
        "kind"] == "trace"
    assigned = alice.post("/api/v1/review/assign", json={
        "items": [{"kind": "comparison", "id": comparison.id},
                  {"kind": "trace", "id": "trace-c"}], "assignee": "bo"})
    assert assigned.json() == {"items": 2, "assignee": "bo", "versions": [
        {"kind": "comparison", "id": comparison.id, "version": 1},
        {"kind": "trace", "id": "trace-c", "version": 1}]}
    bo = alice.get("/api/v1/review/queue", params={"assignee": "bo"}).json()
    assert [i["id"] for i in bo["items"]] == [comparison.id, "trace-c"] and bo["total"] == 2
    assert {i["assignee"] for i in bo["items"]} == {"bo"}
    free = alice.get("/api/v1/review/queue", params={"unassigned": "true"}).json()
    assert comparison.id not in {i["id"] for i in free["items"]}
    only = alice.get("/api/v1/review/queue", params={"kind": "comparison"}).json()
    assert [i["id"] for i in only["items"]] == [comparison.id]
    reviewed = alice.post(f"/api/v1/comparisons/{comparison.id}/review",
                          json={"reviewer": "alice"})
    assert reviewed.status_code == 200
    assert alice.get("/api/v1/review/queue", params={"kind": "comparison"}).json()[
        "items"] == []


def test_queue_routes_refuse_what_is_not_yours_and_unknown_fields(api: Api,
                                                                  world: World) -> None:
    bob = api.client(world.bob_key)
    assert [i["id"] for i in bob.get("/api/v1/review/queue").json()["items"]] == [
        world.bob_trace]
    theirs = bob.post("/api/v1/review/items", json={
        "items": [{"kind": "trace", "id": "trace-a"}], "status": "reviewed"})
    assert theirs.status_code == 404 and "trace-a" in theirs.json()["detail"]
    assert bob.post("/api/v1/review/assign", json={
        "items": [{"kind": "trace", "id": "trace-a"}], "assignee": "x"}).status_code == 404
    assert bob.get("/api/v1/review/next", params={"model_id": world.model_id}).status_code == 404
    for body in ({"items": [{"kind": "trace", "id": world.bob_trace}], "status": "reviewed",
                  "colour": "red"},
                 {"items": [{"kind": "trace", "id": world.bob_trace, "x": 1}],
                  "status": "reviewed"},
                 {"items": [{"kind": "trace", "id": world.bob_trace}], "status": "done"}):
        assert bob.post("/api/v1/review/items", json=body).status_code == 422, body
    # Nothing of alice's changed.
    assert api.client(world.alice_key).get("/api/v1/review/queue").json()["pending"] == 3


def test_bulk_actions_over_every_match_and_chosen_traces(api: Api, world: World) -> None:
    alice = api.client(world.alice_key)
    everything = {"match": {"tool": "get_order"}}
    opted = alice.post("/api/v1/traces/bulk/contribute", json={**everything, "contribute": True})
    assert opted.json() == {"traces": 3, "contribute": True}
    assert all(api.store.get_trace(t).contribute for t in TRACES)
    commented = alice.post("/api/v1/traces/bulk/comment",
                           json={"trace_ids": ["trace-a", "trace-b"], "text": "too slow"})
    assert commented.status_code == 201 and commented.json() == {"comments": 2}
    scored = alice.post("/api/v1/traces/bulk/score",
                        json={"match": {"credit_min": 0.0}, "model_id": world.model_id})
    assert scored.status_code == 202
    assert scored.json()["traces"] == 2  # trace-b and trace-c have positive mean credit
    assert scored.json()["requests"][0]["evaluator"] == world.model_id
    # JSON Lines that import back as the same traces, and CSV with the list's columns.
    exported = alice.post("/api/v1/traces/bulk/export", json={"match": {}, "format": "jsonl"})
    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in exported.text.splitlines()]
    assert {line["id"] for line in lines} == set(TRACES)
    assert all(line["summary"]["actions_scored"] == line["summary"]["actions"] for line in lines)
    path = Path(api.objects.root) / "export.jsonl"
    path.write_text(exported.text)
    back = {r.trace.id: r.trace for r in read_path(path, owner="x")}
    assert back["trace-a"].messages == api.store.get_trace("trace-a").messages
    table = alice.post("/api/v1/traces/bulk/export",
                       json={"trace_ids": ["trace-b"], "format": "csv"})
    rows = list(csv.DictReader(io.StringIO(table.text)))
    assert [r["id"] for r in rows] == ["trace-b"] and rows[0]["preview"] == "hello"
    assert float(rows[0]["mean_action_credit"]) > 0
    # A cell a spreadsheet would run as a formula is written as text.
    formula = trace_object("formula", text='=HYPERLINK("https://evil.example")')
    assert alice.post("/api/v1/traces", content=json.dumps(formula)).status_code == 200
    table = alice.post("/api/v1/traces/bulk/export",
                       json={"trace_ids": ["formula"], "format": "csv"})
    assert next(csv.DictReader(io.StringIO(table.text)))["preview"] == \
        "'=HYPERLINK(\"https://evil.example\")"


def test_bulk_refusals(api: Api, world: World) -> None:
    alice = api.client(world.alice_key)
    for body in ({"contribute": True}, {"trace_ids": ["trace-a"], "match": {},
                                        "contribute": True},
                 {"match": {"colour": "red"}, "contribute": True},
                 {"match": {}, "contribute": True, "extra": 1},
                 {"match": {"credit_min": 3}, "contribute": True}):
        assert alice.post("/api/v1/traces/bulk/contribute", json=body).status_code == 422, body
    theirs = alice.post("/api/v1/traces/bulk/contribute",
                        json={"trace_ids": ["trace-a", world.bob_trace], "contribute": True})
    assert theirs.status_code == 404 and not api.store.get_trace("trace-a").contribute
    nothing = alice.post("/api/v1/traces/bulk/comment", json={"match": {"q": "absent"},
                                                               "text": "x"})
    assert nothing.status_code == 422 and nothing.json()["field"] == "match"
    needs = alice.post("/api/v1/traces/bulk/score", json={"match": {}, "actions": True,
                                                          "model_id": "no-such-model"})
    assert needs.status_code == 404


def test_saved_filters_round_trip_and_stay_private(api: Api, world: World) -> None:
    alice = api.client(world.alice_key)
    saved = alice.post("/api/v1/saved-filters",
                       json={"name": "orders", "match": {"tool": "get_order",
                                                         "credit_min": 0.25}})
    assert saved.status_code == 201
    assert saved.json()["match"] == {"tool": "get_order", "credit_min": "0.25"}
    listed = alice.get("/api/v1/saved-filters").json()["saved_filters"]
    assert [f["name"] for f in listed] == ["orders"]
    bob = api.client(world.bob_key)
    assert bob.get("/api/v1/saved-filters").json() == {"saved_filters": []}
    assert bob.delete(f"/api/v1/saved-filters/{saved.json()['id']}").status_code == 404
    assert alice.post("/api/v1/saved-filters", json={"name": "bad", "match": {
        "outcome": "won"}}).status_code == 422
    assert alice.post("/api/v1/saved-filters", json={"name": "a\x00", "match": {}}
                      ).status_code == 422
    assert alice.delete(f"/api/v1/saved-filters/{saved.json()['id']}").status_code == 204
    assert alice.get("/api/v1/saved-filters").json() == {"saved_filters": []}
