"""Trace import, the trace list, one trace, opt-in and feedback over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from stash_pipeline.store import ActionScore, Release, TraceScore
from stash_pipeline_tests.support.api_helpers import SETTINGS, Api, import_traces, trace_object

TRACES = "/api/v1/traces"


@pytest.fixture
def ana(api: Api) -> tuple[str, httpx.Client]:
    return api.account("ana")


def test_import_takes_jsonl_an_array_or_one_object(ana) -> None:
    _, client = ana
    assert import_traces(client, "a", "b").json()["trace_ids"] == ["a", "b"]
    array = client.post(TRACES, json=[trace_object("c"), trace_object("d")])
    assert array.status_code == 200 and array.json()["imported"] == 2
    single = client.post(f"{TRACES}?contribute=true", json=trace_object("e"))
    assert single.json()["trace_ids"] == ["e"]
    again = client.post(TRACES, json=trace_object("e", text="changed"))
    assert (again.json()["imported"], again.json()["updated"]) == (0, 1)
    same = client.post(TRACES, json=trace_object("e", text="changed"))
    assert (same.json()["updated"], same.json()["unchanged"]) == (0, 1)
    assert client.get(f"{TRACES}/e").json()["version"] == 2
    listed = client.get(TRACES).json()
    assert listed["total"] == 5
    assert {t["id"]: t["contribute"] for t in listed["traces"]}["e"] is True


def test_an_outcome_field_that_matched_nothing_is_a_warning(ana) -> None:
    _, client = ana
    body = [{**trace_object(t), "metadata": {"task_id": "t1", "result": {"reward": 1.0}}}
            for t in ("a", "b")]
    wrong = client.post(f"{TRACES}?outcome_field=reward", json=body).json()
    assert (wrong["outcomes"], wrong["outcome_field"], wrong["outcome_field_matched"]) == \
        (0, "metadata.reward", 0)
    assert wrong["warnings"] == [
        "the outcome field metadata.reward matched nothing: none of the 2 traces has a value "
        "there, so no verified outcome was read from it; the traces' metadata has result, "
        "task_id"]
    right = client.post(f"{TRACES}?outcome_field=metadata.result.reward", json=body).json()
    assert (right["outcomes"], right["outcome_field_matched"], right["warnings"]) == (2, 2, [])
    quiet = client.post(TRACES, json=body).json()  # the default path, not asked for: no warning
    assert quiet["warnings"] == [] and "outcome_field" not in quiet
    assert client.post(f"{TRACES}?outcome_field=", json=body).json()["warnings"] == []


def test_bad_input_is_422_naming_record_and_field_and_stores_nothing(ana) -> None:
    _, client = ana
    bad = trace_object("y")
    bad["messages"][2]["tool_calls"][0]["function"]["arguments"] = "[1, 2]"
    body = json.dumps(trace_object("x")) + "\n" + json.dumps(bad) + "\n"
    response = client.post(TRACES, content=body)
    assert response.status_code == 422
    error = response.json()
    assert (error["file"], error["record"]) == ("request body", "line 2")
    assert error["field"].startswith("messages[2].tool_calls[0]")
    assert "/tmp" not in error["detail"]
    assert client.get(TRACES).json()["total"] == 0


@pytest.mark.parametrize("content", [b"", b"not json", b"{\"role\": \"user\"}"])
def test_empty_or_unreadable_bodies_are_422(ana, content: bytes) -> None:
    _, client = ana
    assert client.post(TRACES, content=content).status_code == 422


def test_a_body_over_the_limit_is_413_declared_or_streamed(ana) -> None:
    _, client = ana
    line = json.dumps(trace_object("big", text="x" * 10_000)) + "\n"
    body = line * (SETTINGS.max_import_bytes // len(line) + 1)
    assert client.post(TRACES, content=body).status_code == 413
    chunked = client.post(TRACES, content=iter([body.encode()[i:i + 65536]
                                                for i in range(0, len(body), 65536)]))
    assert chunked.status_code == 413
    assert client.post("/api/v1/sql", content=b"x" * (SETTINGS.max_json_bytes + 1),
                       headers={"Content-Type": "application/json"}).status_code == 413
    assert client.get(TRACES).json()["total"] == 0


def test_a_trace_id_taken_by_another_account_is_409_and_nothing_is_stored(api: Api,
                                                                         ana) -> None:
    _, client = ana
    other_id, other = api.account("bo")
    assert import_traces(other, "shared-id").status_code == 200
    response = import_traces(client, "mine", "shared-id")
    assert response.status_code == 409
    assert "trace id shared-id in the request body is taken" in response.json()["detail"]
    assert other_id not in response.json()["detail"]
    assert client.get(TRACES).json()["total"] == 0


def test_the_list_paginates(ana) -> None:
    _, client = ana
    import_traces(client, *[f"t{i}" for i in range(7)])
    seen, offset = [], 0
    while offset is not None:
        page = client.get(TRACES, params={"limit": 3, "offset": offset, "sort": "created"})
        body = page.json()
        assert body["total"] == 7 and len(body["traces"]) <= 3
        seen += [t["id"] for t in body["traces"]]
        offset = body["next_offset"]
    assert sorted(seen) == [f"t{i}" for i in range(7)] and len(set(seen)) == 7
    for params in ({"limit": 0}, {"limit": 501}, {"offset": -1}, {"sort": "name"}):
        response = client.get(TRACES, params=params)
        assert response.status_code == 422 and response.json()["field"] == next(iter(params))


def test_the_list_shows_personal_scores_apart_from_shared_credit_and_sorts_by_them(
        api: Api, ana) -> None:
    owner, client = ana
    import_traces(client, "low", "high", "none")
    model = client.post("/api/v1/rm/reward-models",
                        json={"name": "m", "trace_ids": ["low"]}).json()["id"]
    api.store.save_scores([TraceScore("low", 1, model, -2.0), TraceScore("high", 1, model, 3.0)])
    api.store.save_release(Release("v1", "file:///x", {}, {}))
    actions = {t: api.store.get_trace(t).actions() for t in ("low", "high")}
    api.store.save_action_scores("v1", {"low": 1, "high": 1}, [
        ActionScore(a.id, t, 1, "v1", 0.0, credit)
        for t, credit in (("low", 0.9), ("high", -0.5)) for a in actions[t]])
    page = client.get(TRACES, params={"sort": "-latest_score"}).json()
    assert [t["id"] for t in page["traces"]] == ["high", "low", "none"]
    high = page["traces"][0]
    assert (high["latest_score"], high["latest_score_model_id"]) == (3.0, model)
    assert (high["mean_action_credit"], high["actions_scored"]) == (pytest.approx(-0.5), 3)
    assert page["shared_evaluator"] == "v1"
    ascending = client.get(TRACES, params={"sort": "latest_score"}).json()["traces"]
    assert [t["id"] for t in ascending] == ["low", "high", "none"]
    by_credit = client.get(TRACES, params={"sort": "-mean_action_credit"}).json()["traces"]
    assert [t["id"] for t in by_credit] == ["low", "high", "none"]
    assert client.get(TRACES, params={"model_id": model}).status_code == 200
    assert client.get(TRACES, params={"model_id": "not-mine"}).status_code == 404


def test_one_trace_waits_for_the_first_release_then_shows_its_scores(api: Api, ana) -> None:
    _, client = ana
    import_traces(client, "t")
    trace = client.get(f"{TRACES}/t").json()
    assert trace["shared_evaluator"] == {"release": None, "status": "waiting"}
    assert [m["role"] for m in trace["messages"]][:2] == ["system", "user"]
    assert [a["local_id"] for a in trace["actions"]] == ["m2", "m2.call0", "m4"]
    assert trace["actions"][1]["tool_name"] == "get_order"
    assert (trace["scores"], trace["action_scores"]) == ([], [])
    api.store.save_release(Release("v1", "file:///x", {}, {}))
    assert client.get(f"{TRACES}/t").json()["shared_evaluator"]["status"] == "pending"
    first = api.store.get_trace("t").actions()[0]
    api.store.save_action_scores("v1", {"t": 1}, [ActionScore(first.id, "t", 1, "v1", 1.5, 0.4)])
    trace = client.get(f"{TRACES}/t").json()
    assert trace["shared_evaluator"]["status"] == "scored"
    assert trace["action_scores"] == [{"action_id": first.id, "evaluator": "v1",
                                       "kind": "shared", "raw": 1.5, "credit": 0.4}]
    assert client.get(f"{TRACES}/missing").status_code == 404


def test_contribution_opt_in_and_out(ana) -> None:
    _, client = ana
    import_traces(client, "t")
    assert client.patch(f"{TRACES}/t", json={"contribute": True}).json() == \
        {"id": "t", "contribute": True}
    assert client.get(f"{TRACES}/t").json()["contribute"] is True
    assert client.patch(f"{TRACES}/t", json={"contribute": False}).status_code == 200
    assert client.get(f"{TRACES}/t").json()["contribute"] is False
    for body, field in (({"contribute": "yes"}, "contribute"), ({"agent": "x"}, "agent"),
                        ({}, "contribute")):
        response = client.patch(f"{TRACES}/t", json=body)
        assert response.status_code == 422 and response.json()["field"] == field
    assert client.patch(f"{TRACES}/missing", json={"contribute": True}).status_code == 404


def test_ratings_and_comments_on_traces_and_actions(ana) -> None:
    _, client = ana
    import_traces(client, "t")
    step = client.post(f"{TRACES}/t/ratings", json={"value": 1, "action_id": "m2.call0"})
    assert step.status_code == 201 and step.json()["action_id"] == "t/m2.call0"
    again = client.post(f"{TRACES}/t/ratings", json={"value": -1, "action_id": "t/m2.call0"})
    assert again.json()["id"] == step.json()["id"]
    assert client.post(f"{TRACES}/t/ratings", json={"value": 0.5}).status_code == 201
    comment = client.post(f"{TRACES}/t/comments",
                          json={"text": "Should ask first.", "action_id": "m4", "author": "ana"})
    assert comment.status_code == 201
    feedback = client.get(f"{TRACES}/t").json()["feedback"]
    ratings = {f["action_id"]: f["value"] for f in feedback if f["type"] == "Rating"}
    assert ratings == {"t/m2.call0": -1.0, None: 0.5}
    assert [f["text"] for f in feedback if f["type"] == "Comment"] == ["Should ask first."]
    refused = {
        "ratings": [({"value": 1, "action_id": "m1"}, "action_id"),
                    ({"value": "1"}, "value"), ({"value": True}, "value"), ({}, "value"),
                    ({"value": 1, "extra": 1}, "extra")],
        "comments": [({"text": ""}, "text"), ({"text": "x", "action_id": "m9"}, "action_id")],
    }
    for kind, cases in refused.items():
        for body, field in cases:
            response = client.post(f"{TRACES}/t/{kind}", json=body)
            assert response.status_code == 422, body
            assert response.json()["field"] == field, body
    nan = client.post(f"{TRACES}/t/ratings", content=b'{"value": NaN}',
                      headers={"Content-Type": "application/json"})
    assert nan.status_code == 422
    assert client.post(f"{TRACES}/missing/comments", json={"text": "x"}).status_code == 404


def test_nul_characters_get_the_same_answer_on_both_databases(ana) -> None:
    _, client = ana
    import_traces(client, "t")
    assert client.get(f"{TRACES}/a%00b").status_code == 404
    assert client.get("/api/v1/rm/reward-models/a%00b").status_code == 404
    assert client.get(TRACES, params={"model_id": "a\x00"}).json()["field"] == "model_id"
    for kind, body, field in (("comments", {"text": "a\x00"}, "text"),
                              ("comments", {"text": "a", "author": "\x00"}, "author")):
        response = client.post(f"{TRACES}/t/{kind}", json=body)
        assert response.status_code == 422 and response.json()["field"] == field
    model = client.post("/api/v1/rm/reward-models", json={"name": "a\x00", "trace_ids": ["t"]})
    assert model.status_code == 422 and model.json()["field"] == "name"


def test_an_import_materialises_the_traces_asset(ana) -> None:
    import os

    import dagster as dg

    _, client = ana
    import_traces(client, "m1", "m2")
    home = Path(os.environ["STASH_HOME"]) / "dagster"
    with dg.DagsterInstance.from_config(str(home)) as instance:
        [event] = instance.fetch_materializations(dg.AssetKey("traces"), limit=5).records
    metadata = event.asset_materialization.metadata
    assert metadata["traces"].value == 2 and "openai" in metadata["by_format"].value
