"""The seed's reward-model routes over real HTTP: codes, defaults, weights and Score again."""

from __future__ import annotations

import time
import uuid
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from stash_pipeline.objects import UrlSigner
from stash_pipeline_tests.support.api_helpers import Api, import_traces, succeed

RM = "/api/v1/rm/reward-models"


@pytest.fixture
def ana(api: Api) -> httpx.Client:
    _, client = api.account("ana")
    assert import_traces(client, "t1", "t2").status_code == 200
    return client


def test_create_returns_the_queued_model_with_the_seeds_defaults(ana: httpx.Client) -> None:
    response = ana.post(RM, json={"name": "refund-policy-v2", "trace_ids": ["t1"], "epochs": 2})
    assert response.status_code == 201
    model = response.json()
    assert (model["status"], model["epochs"], model["base_model"], model["max_pairs"]) == \
        ("queued", 2, "Qwen/Qwen3-0.6B", 4000)
    assert ana.get(f"{RM}/{model['id']}").json() == model
    assert ana.get(RM).json() == {"reward_models": [model]}


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "m", "trace_ids": ["t1"], "compute": "modal"}, "compute"),
    ({"name": "m", "trace_ids": ["t1"], "learning_rate": 1}, "learning_rate"),
    ({"name": "m"}, "trace_ids"),
    ({"name": "m", "trace_ids": []}, "trace_ids"),
    ({"name": "m", "trace_ids": ["nope"]}, "trace_ids[0]"),
    ({"name": "m", "trace_ids": ["t1"], "epochs": 2.5}, "epochs"),
    ({"name": "m", "trace_ids": ["t1"], "max_pairs": 0}, "max_pairs"),
    ({"trace_ids": ["t1"]}, "name"),
])
def test_bad_requests_are_422_naming_the_field(ana: httpx.Client, body: dict,
                                               field: str) -> None:
    response = ana.post(RM, json=body)
    assert response.status_code == 422
    assert response.json()["field"] == field
    assert ana.get(RM).json() == {"reward_models": []}


@pytest.mark.parametrize("content", [b"[1, 2]", b"{not json", b""])
def test_a_body_that_is_not_a_json_object_is_422(ana: httpx.Client, content: bytes) -> None:
    response = ana.post(RM, content=content, headers={"Content-Type": "application/json"})
    assert response.status_code == 422


def test_an_account_from_before_the_rollout_gets_404_everywhere(api: Api) -> None:
    _, old = api.account("old", before_rollout=True)
    assert import_traces(old, "o1").status_code == 200
    assert old.post(RM, json={"name": "m", "trace_ids": ["o1"]}).status_code == 404
    assert old.get(RM).status_code == 404
    for path in ("x", "x/weights"):
        assert old.get(f"{RM}/{path}").status_code == 404
    assert old.post(f"{RM}/x/score").status_code == 404


def test_weights_are_404_until_succeeded_then_a_signed_url_that_needs_no_key(
        api: Api, ana: httpx.Client, tmp_path) -> None:
    model = ana.post(RM, json={"name": "m", "trace_ids": ["t1"]}).json()
    assert ana.get(f"{RM}/{model['id']}/weights").status_code == 404
    succeed(api.store, api.objects, model["id"], tmp_path)
    assert ana.get(f"{RM}/{model['id']}").json()["status"] == "succeeded"
    before = int(time.time())
    url = ana.get(f"{RM}/{model['id']}/weights").json()["url"]
    after = time.time()
    assert url.startswith(f"{api.url}/api/v1/objects/")
    query = parse_qs(urlsplit(url).query)
    assert before + 300 <= int(query["expires"][0]) <= after + 300  # five minutes from the request
    download = httpx.get(url)  # no Authorization header
    assert download.status_code == 200 and download.content[:2] == b"\x1f\x8b"


def test_altered_and_expired_download_urls_are_403(api: Api, ana: httpx.Client,
                                                   tmp_path) -> None:
    model = ana.post(RM, json={"name": "m", "trace_ids": ["t1"]}).json()
    succeed(api.store, api.objects, model["id"], tmp_path)
    url = ana.get(f"{RM}/{model['id']}/weights").json()["url"]
    path, query = urlsplit(url).path, parse_qs(urlsplit(url).query)
    key = path.removeprefix("/api/v1/objects/")
    expires, signature = query["expires"][0], query["signature"][0]
    altered = [
        f"{path}?expires={int(expires) + 60}&signature={signature}",
        f"{path}?expires={expires}&signature={'0' * len(signature)}",
        f"/api/v1/objects/{key.replace('reward-models', 'shared-evaluator')}"
        f"?expires={expires}&signature={signature}",
        path,
    ]
    for target in altered:
        assert httpx.get(api.url + target).status_code == 403, target
    old_expires, old_signature = UrlSigner(b"k" * 32).sign(key, 1, now=time.time() - 60)
    expired = httpx.get(f"{api.url}{path}?expires={old_expires}&signature={old_signature}")
    assert expired.status_code == 403 and "expired" in expired.json()["detail"]


def test_score_again_needs_a_succeeded_model(api: Api, ana: httpx.Client, tmp_path) -> None:
    model = ana.post(RM, json={"name": "m", "trace_ids": ["t1"]}).json()
    assert ana.post(f"{RM}/{model['id']}/score").status_code == 409
    succeed(api.store, api.objects, model["id"], tmp_path)
    response = ana.post(f"{RM}/{model['id']}/score")
    assert response.status_code == 202 and response.json()["status"] == "succeeded"
    assert api.store.get_reward_model(model["id"]).score_generation == 1
    # Its run queues the owner's every trace for the model (issue 54): the view says how many
    # are still queued, until the queue's chunks have scored them.
    queued = api.store.queue_score_again(model["id"])
    shown = ana.get(f"{RM}/{model['id']}").json()["score_again"]
    assert (shown["request"], shown["queued_traces"]) == (1, queued) and queued > 0


@pytest.mark.parametrize("authorization", [None, "Bearer", "Bearer stash_wrong",
                                           "Basic YTpi", "stash_no_scheme"])
def test_missing_or_bad_keys_are_401(api: Api, authorization: str | None) -> None:
    api.account("ana")
    headers = {"Authorization": authorization} if authorization else {}
    anonymous = api.client()
    for method, path in (("GET", RM), ("POST", RM), ("GET", "/api/v1/traces"),
                         ("POST", "/api/v1/sql"), ("GET", "/api/v1/account")):
        response = anonymous.request(method, path, headers=headers, json={})
        assert response.status_code == 401, (method, path)
        assert response.headers["www-authenticate"] == "Bearer"


def test_the_account_route_says_whose_key_it_is(api: Api) -> None:
    account_id, client = api.account("ana")
    assert client.get("/api/v1/account").json()["id"] == account_id


def test_score_again_for_chosen_traces(api: Api, ana: httpx.Client, tmp_path) -> None:
    """POST /api/v1/traces/score (issue 18): queued with the release by default or a model of
    yours; actions asked of a model trained without action comparisons are a 422 naming why."""
    score = "/api/v1/traces/score"
    assert ana.post(score, json={"trace_ids": ["t1"]}).status_code == 404  # no release yet
    model = ana.post(RM, json={"name": "m", "trace_ids": ["t1"]}).json()
    assert ana.post(score, json={"trace_ids": ["t1"], "model_id": model["id"]}).status_code == 404
    succeed(api.store, api.objects, model["id"], tmp_path)  # metrics without action training
    refused = ana.post(score, json={"trace_ids": ["t1"], "model_id": model["id"],
                                    "actions": True})
    assert refused.status_code == 422
    assert "new training with action comparisons" in refused.json()["detail"]
    assert api.store.scoring_requests() == []
    queued = ana.post(score, json={"trace_ids": ["t2", "t1"], "model_id": model["id"]})
    assert queued.status_code == 202
    body = queued.json()
    assert (body["evaluator"], body["trace_ids"], body["actions"]) == \
        (model["id"], ["t2", "t1"], False)
    [stored] = api.store.scoring_requests()
    assert stored.traces == {"t2": 1, "t1": 1} and stored.owner != "" and not stored.actions
    # No run yet (no daemon here): queued, waiting for the pipeline to make its run (issue 43).
    waiting = {"waiting_for": "run", "runs_ahead": None, "run_id": None,
               "text": "waiting for the pipeline to start its run"}
    assert (body["status"], body["error"], body["wait"]) == ("queued", None, waiting)
    polled = ana.get(f"{score}/{body['request_id']}")
    assert polled.status_code == 200 and polled.json() == body
    assert ana.get(f"{score}/{uuid.uuid4()}").status_code == 404
    assert ana.get(f"{score}/{stored.legacy_id or 1}").status_code == 404  # made since UUIDs
    assert ana.get(f"{score}/not-an-id").status_code == 422
    shown = ana.get(f"{RM}/{model['id']}").json()
    assert (shown["wait"], shown["score_again"]) == (None, None)  # succeeded, never rescored
    queued_model = ana.post(RM, json={"name": "q", "trace_ids": ["t1"]}).json()
    assert queued_model["wait"] == waiting and queued_model["score_again"] is None
    for bad in ({"trace_ids": []}, {"trace_ids": ["t1"], "compute": "modal"},
                {"trace_ids": ["t1"], "actions": "yes"}, {"trace_ids": ["t1/m2"]},
                {"trace_ids": ["t1"], "model_id": "m\u0000"}):
        assert ana.post(score, json=bad).status_code == 422, bad
    _, bo = api.account("bo")
    assert bo.post(score, json={"trace_ids": ["t1"], "model_id": model["id"]}).status_code == 404
    assert bo.get(f"{score}/{body['request_id']}").status_code == 404  # ana's request
