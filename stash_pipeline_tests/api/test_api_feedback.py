"""Comparisons, reviews, outcomes, batch feedback and contribution of many traces over real HTTP,
on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import httpx
import pytest

from stash_pipeline_tests.support.api_helpers import Api, import_traces

API = "/api/v1"


@pytest.fixture
def ana(api: Api) -> tuple[str, httpx.Client]:
    account, client = api.account("ana")
    assert import_traces(client, "a1", "a2", "a3").status_code == 200
    return account, client


@pytest.fixture
def bob(api: Api) -> tuple[str, httpx.Client]:
    account, client = api.account("bob")
    assert import_traces(client, "b1").status_code == 200
    return account, client


def stored_feedback(api: Api, *trace_ids: str) -> list:
    return api.store.feedback_for(list(trace_ids))


def test_comparison_review_and_outcome_routes(api, ana) -> None:
    _, client = ana
    made = client.post(f"{API}/comparisons", json={"chosen": "a1/m4", "rejected": "a2/m4",
                                                   "author": "ann"})
    assert made.status_code == 201, made.text
    comparison = made.json()
    assert (comparison["status"], comparison["independently_reviewed"]) == ("pending", False)
    reviewed = client.post(f"{API}/comparisons/{comparison['id']}/review",
                           json={"reviewer": "qa"})
    assert reviewed.status_code == 200
    assert (reviewed.json()["status"], reviewed.json()["independently_reviewed"]) == (
        "approved", True)
    outcome = client.post(f"{API}/traces/a1/outcomes", json={"reward": 1, "source": "tests"})
    assert outcome.status_code == 201 and outcome.json()["reward"] == 1.0
    kinds = sorted(type(f).__name__ for f in stored_feedback(api, "a1"))
    assert kinds == ["ReviewedComparison", "VerifiedOutcome"]
    mixed = client.post(f"{API}/comparisons", json={"chosen": "a1/m4", "rejected": "a2"})
    assert mixed.status_code == 422 and mixed.json()["field"] == "rejected"
    unreviewed = client.post(f"{API}/comparisons", json={"chosen": "a1", "rejected": "a2",
                                                         "status": "approved"})
    assert unreviewed.status_code == 422 and unreviewed.json()["field"] == "reviewer"


def test_another_accounts_traces_and_comparisons_are_404(api, ana, bob) -> None:
    _, client = ana
    _, bobs = bob
    assert client.post(f"{API}/comparisons", json={"chosen": "a1", "rejected": "b1"}
                       ).status_code == 404
    assert client.post(f"{API}/traces/b1/outcomes", json={"reward": 0}).status_code == 404
    theirs = bobs.post(f"{API}/comparisons", json={"chosen": "b1/m4", "rejected": "b1/m2",
                                                   "author": "bo"}).json()
    assert client.post(f"{API}/comparisons/{theirs['id']}/review",
                       json={"reviewer": "ann"}).status_code == 404
    assert stored_feedback(api, "a1") == []


def test_batch_is_all_or_nothing(api, ana, bob) -> None:
    _, client = ana
    good = [
        {"type": "rating", "trace_id": "a1", "action_id": "m4", "value": 1, "author": "ann"},
        {"type": "comment", "trace_id": "a1", "text": "Checked first: good."},
        {"type": "comparison", "chosen": "a1/m4", "rejected": "a2/m4", "author": "ann"},
        {"type": "outcome", "trace_id": "a3", "reward": 0},
    ]
    bad_field = {"type": "rating", "trace_id": "a2", "value": "high"}
    response = client.post(f"{API}/feedback", json={"items": [*good, bad_field]})
    assert response.status_code == 422
    error = response.json()
    assert (error["record"], error["field"]) == ("items[4]", "value")
    assert stored_feedback(api, "a1", "a2", "a3") == []

    unknown_action = {"type": "rating", "trace_id": "a2", "action_id": "m99", "value": 1}
    response = client.post(f"{API}/feedback", json={"items": [*good, unknown_action]})
    assert response.status_code == 404 and "items[4]" in response.json()["detail"]
    foreign = {"type": "outcome", "trace_id": "b1", "reward": 1}
    response = client.post(f"{API}/feedback", json={"items": [foreign, *good]})
    assert response.status_code == 404 and "items[0]" in response.json()["detail"]
    assert stored_feedback(api, "a1", "a2", "a3", "b1") == []

    stored = client.post(f"{API}/feedback", json={"items": good})
    assert stored.status_code == 201, stored.text
    body = stored.json()
    assert (body["items"], body["ratings"], body["comments"], body["comparisons"],
            body["outcomes"]) == (4, 1, 1, 1, 1)
    review = {"type": "review", "comparison_id": body["ids"][2], "reviewer": "qa"}
    assert client.post(f"{API}/feedback", json={"items": [review]}).json()["reviews"] == 1
    (comparison,) = [f for f in stored_feedback(api, "a1") if hasattr(f, "status")]
    assert comparison.independently_reviewed


def test_contribute_many_is_all_or_nothing(api, ana, bob) -> None:
    _, client = ana
    refused = client.post(f"{API}/traces/contribute",
                          json={"trace_ids": ["a1", "b1"], "contribute": True})
    assert refused.status_code == 404 and "b1" in refused.json()["detail"]
    assert api.store.trace_ids(contribute=True) == []
    done = client.post(f"{API}/traces/contribute",
                       json={"trace_ids": ["a1", "a2"], "contribute": True})
    assert done.status_code == 200 and done.json() == {"traces": 2, "contribute": True}
    assert api.store.trace_ids(contribute=True) == ["a1", "a2"]
    assert client.post(f"{API}/traces/contribute", json={"trace_ids": [], "contribute": True}
                       ).status_code == 422


def test_a_preference_data_set_imports_over_http(api, ana) -> None:
    _, client = ana
    good = {"chosen": "\n\nHuman: Hi\n\nAssistant: Hello!",
            "rejected": "\n\nHuman: Hi\n\nAssistant: Go."}
    bad = {"chosen": "\n\nHuman: Hi\n\nAssistant: A", "rejected": "\n\nHuman: Hi"}
    body = "\n".join(json.dumps(r) for r in (good, bad)) + "\n"
    refused = client.post(f"{API}/traces", content=body)
    assert refused.status_code == 422 and refused.json()["record"] == "line 2"
    assert "skip_invalid=true" in refused.json()["detail"]  # the option that skips it
    query = "?author=labeler&reviewer=qa&skip_invalid=true"
    first = client.post(f"{API}/traces{query}", content=body).json()
    assert (first["comparisons"], first["imported"], first["skipped_invalid"]) == (1, 2, 1)
    again = client.post(f"{API}/traces{query}", content=body).json()
    assert (again["imported"], again["updated"], again["unchanged"]) == (0, 0, 2)
    (comparison,) = stored_feedback(api, *first["trace_ids"])
    assert comparison.independently_reviewed
    no_comparison = {"chosen": "\n\nHuman: Yo\n\nAssistant: ", "rejected": good["rejected"]}
    body = "\n".join(json.dumps(r) for r in (good, no_comparison)) + "\n"
    skipped = client.post(f"{API}/traces{query.replace('true', 'false')}", content=body).json()
    assert (skipped["unchanged"], skipped["skipped_invalid"]) == (2, 1)  # an empty reply


def test_unstorable_review_names_are_422(api, ana) -> None:
    _, client = ana
    review = {"type": "review", "comparison_id": "c1", "reviewer": "q\u0000a"}
    response = client.post(f"{API}/feedback", json={"items": [review]})
    assert response.status_code == 422
    assert (response.json()["record"], response.json()["field"]) == ("items[0]", "reviewer")


def test_batch_items_with_unknown_keys_are_422_naming_the_item_and_key(api, ana) -> None:
    """A misspelt ``action_id`` must not store a whole-trace rating: every type of item refuses a
    field it does not have, as the single-item routes do."""
    _, client = ana
    good = {"type": "rating", "trace_id": "a1", "action_id": "m4", "value": 1}
    misspelt = [
        {"type": "rating", "trace_id": "a1", "action": "m99", "value": 1},
        {"type": "comment", "trace_id": "a1", "text": "x", "actionid": "m4"},
        {"type": "comparison", "chosen": "a1/m4", "rejected": "a2/m4", "reviewr": "bob"},
        {"type": "review", "comparison_id": "c", "reviewer": "bob", "state": "rejected"},
        {"type": "outcome", "trace_id": "a1", "reward": 1, "value": 1},
    ]
    for item in misspelt:
        response = client.post(f"{API}/feedback", json={"items": [good, item]})
        assert response.status_code == 422, (item, response.text)
        error = response.json()
        unknown = next(k for k in item if k not in ("type", "trace_id", "text", "reward",
                                                    "value", "chosen", "rejected",
                                                    "comparison_id", "reviewer")
                       or (item["type"] == "outcome" and k == "value"))
        assert (error["record"], error["field"]) == ("items[1]", unknown), error
        assert "unknown field" in error["detail"]
    assert stored_feedback(api, "a1", "a2") == []
