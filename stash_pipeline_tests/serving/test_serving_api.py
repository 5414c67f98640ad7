"""The /rewards routes end to end: the API (keys, owner checks, limits) forwarding to the scoring
server, which answers with the numbers stored scoring gives the same trace; and every refusal."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from stash_pipeline.core.reward_requests import MAX_CANDIDATES, MAX_MESSAGES
from stash_pipeline.services.rewards import parse_body
from stash_pipeline.serving.protocol import REWARDS_PATH, rewards_body
from stash_pipeline_tests.support.held_engine import HeldEngine
from stash_pipeline_tests.support.serving_helpers import (
    LONG_TEXT,
    Api,
    Deployment,
    api_server,
    closed_port_url,
    conversation,
    import_conversations,
    model_route,
    release,
    scoring_server,
    stored_scoring,
    succeeded_model,
)
from stash_pipeline_tests.support.waiting import REQUEST_S, bound, wait_until

pytestmark = pytest.mark.slow


def shape(value):
    """Keys in order and the kinds of the values: what the API must pass on unchanged."""
    if isinstance(value, dict):
        return [(key, shape(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [shape(item) for item in value]
    return type(value).__name__


def assert_forwarded(served: Deployment, evaluator: str, body: dict, answer: dict) -> None:
    """The API's answer has the scoring server's own keys, nested ones included, in order."""
    direct = served.scoring_client().post(
        REWARDS_PATH, json=rewards_body(evaluator, parse_body(body), 60.0))
    assert direct.status_code == 200, direct.text
    assert shape(answer) == shape(direct.json())


def assert_matches_stored(answer: dict, store, trace_id: str, evaluator: str) -> None:
    stored = next(s for s in store.scores_for(trace_id) if s.evaluator == evaluator)
    assert answer["raw"] == pytest.approx(stored.raw, abs=1e-5)
    assert answer["calibrated"] == pytest.approx(stored.calibrated, abs=1e-6)
    actions = {a.action_id.removeprefix(f"{trace_id}/"): a
               for a in store.action_scores_for(trace_id, evaluator)}
    assert sorted(actions) == sorted(a["action_id"] for a in answer["actions"]) and actions
    for action in answer["actions"]:
        assert action["raw"] == pytest.approx(actions[action["action_id"]].raw, abs=1e-5)
        assert action["credit"] == pytest.approx(actions[action["action_id"]].credit, abs=1e-6)


def test_served_rewards_equal_the_stored_scores_of_the_same_trace(served: Deployment,
                                                                  checkpoints, tmp_path: Path):
    """A personal model and the current release, each scoring a short trace and one longer than
    the window (its beginning cut): the API's answer for the trace's content, never stored by
    the request, equals what the scoring job stored for the imported trace."""
    _, client = served.account("ana")
    traces = [conversation("t1"), conversation("t2", text=LONG_TEXT)]
    import_conversations(client, *traces)
    model_id = succeeded_model(served, client, "ana", checkpoints["personal"], ["t1", "t2"])
    version = release(served, checkpoints["shared"])
    for evaluator in (model_id, version):
        stored_scoring(served, evaluator, ["t1", "t2"], tmp_path / evaluator)
    for trace in traces:
        personal = client.post(model_route(model_id), json={"conversation": trace})
        assert personal.status_code == 200, personal.text
        assert personal.json()["evaluator"] == model_id and personal.json()["kind"] == "personal"
        assert_matches_stored(personal.json(), served.api.store, trace["id"], model_id)
        assert_forwarded(served, model_id, {"conversation": trace}, personal.json())
        shared = client.post("/api/v1/evaluator/rewards", json={"conversation": trace})
        assert shared.status_code == 200, shared.text
        assert shared.json()["evaluator"] == version and shared.json()["kind"] == "shared"
        assert_matches_stored(shared.json(), served.api.store, trace["id"], version)
    # The request stored nothing: the traces keep their two scores each.
    assert len(served.api.store.scores_for("t1")) == 2


def test_candidates_are_ranked_by_the_conversations_they_complete(served: Deployment,
                                                                  checkpoints):
    _, client = served.account("ana")
    import_conversations(client, conversation("t1"))
    model_id = succeeded_model(served, client, "ana", checkpoints["personal"], ["t1"])
    context = conversation("t1")["messages"][:2]
    candidates = [
        "Let me check that order for you.",
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c9", "type": "function",
            "function": {"name": "get_order", "arguments": "{\"order_id\": 7}"}}]},
        {"role": "assistant", "content": "No refunds, sorry."},
    ]
    response = client.post(model_route(model_id),
                           json={"context": {"messages": context}, "candidates": candidates})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert len(answer["candidates"]) == 3
    assert_forwarded(served, model_id, {"context": {"messages": context},
                                        "candidates": candidates}, answer)
    raws = [c["raw"] for c in answer["candidates"]]
    assert answer["ranking"] == sorted(range(3), key=lambda i: -raws[i])
    assert sorted(c["rank"] for c in answer["candidates"]) == [1, 2, 3]
    assert [a["action_id"] for a in answer["candidates"][1]["actions"]] == ["m2.call0"]
    for index, candidate in enumerate(candidates):
        message = ({"role": "assistant", "content": candidate} if isinstance(candidate, str)
                   else candidate)
        alone = client.post(model_route(model_id),
                            json={"conversation": {"messages": context + [message]}}).json()
        assert answer["candidates"][index]["raw"] == pytest.approx(alone["raw"], abs=1e-5)
        assert answer["candidates"][index]["calibrated"] == pytest.approx(alone["calibrated"],
                                                                          abs=1e-6)
        own = [a for a in alone["actions"] if a["action_id"].startswith("m2")]
        assert [a["credit"] for a in answer["candidates"][index]["actions"]] == pytest.approx(
            [a["credit"] for a in own], abs=1e-5)
    # Anthropic's form: the context's format is the candidates' too.
    anthropic = client.post(model_route(model_id), json={
        "context": {"system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}]},
        "candidates": [{"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "u1", "name": "get_order", "input": {"order_id": 7}}]}],
        "format": "anthropic"})
    assert anthropic.status_code == 200, anthropic.text
    assert [a["action_id"] for a in anthropic.json()["candidates"][0]["actions"]] == [
        "m2", "m2.call0"]


def test_a_model_without_action_comparisons_scores_without_credit(served: Deployment,
                                                                  checkpoints):
    _, client = served.account("ana")
    import_conversations(client, conversation("t1"))
    model_id = succeeded_model(served, client, "ana", checkpoints["no_actions"], ["t1"],
                               actions=False)
    answer = client.post(model_route(model_id), json={"conversation": conversation("t1")}).json()
    assert isinstance(answer["raw"], float) and 0 < answer["calibrated"] < 1
    assert answer["actions"] and all(a["credit"] is None for a in answer["actions"])


def test_keys_owners_and_statuses(served: Deployment, checkpoints):
    ana, client = served.account("ana")
    _, bob = served.account("bob")
    _, old = served.account("old", before_rollout=True)
    import_conversations(client, conversation("t1"))
    model_id = succeeded_model(served, client, ana, checkpoints["personal"], ["t1"])
    queued = client.post("/api/v1/rm/reward-models",
                         json={"name": "q", "trace_ids": ["t1"]}).json()["id"]
    body = {"conversation": conversation("t1")}
    for anonymous in (served.client(), served.client("stash_not-a-key")):
        refused = anonymous.post(model_route(model_id), json=body,
                                 headers={"X-Request-ID": "agent-run-9"})
        assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == "Bearer"
        assert refused.headers["X-Request-ID"] == "agent-run-9"  # the API's, as web/ gives it
        assert anonymous.post("/api/v1/evaluator/rewards", json=body).status_code == 401
    # Another account's model answers as a model that does not exist.
    theirs = bob.post(model_route(model_id), json=body)
    missing = bob.post(model_route("no-such-model"), json=body)
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["detail"] == missing.json()["detail"].replace("no-such-model", model_id)
    assert old.post(model_route(model_id), json=body).status_code == 404
    not_yet = client.post(model_route(queued), json=body)
    assert not_yet.status_code == 409 and "queued" in not_yet.json()["detail"]
    no_release = client.post("/api/v1/evaluator/rewards", json=body)
    assert no_release.status_code == 404 and "release" in no_release.json()["detail"]
    assert client.post(model_route(model_id), json=body).status_code == 200


@pytest.mark.parametrize("body, field", [
    ({"conversation": {"messages": []}, "temperature": 0}, "temperature"),
    ({}, "conversation"),
    ({"conversation": [{"role": "user", "content": "hi"}], "context": []}, "context"),
    ({"context": [{"role": "user", "content": "hi"}]}, "candidates"),
    ({"context": [{"role": "user", "content": "hi"}], "candidates": []}, "candidates"),
    ({"context": [{"role": "user", "content": "hi"}], "candidates": ["a"] * (MAX_CANDIDATES + 1)},
     "candidates"),
    ({"context": [{"role": "user", "content": "hi"}], "candidates": [{"role": "user"}]},
     "candidates[0].role"),
    ({"context": [{"role": "user", "content": "hi"}], "candidates": [{"content": ""}]},
     "candidates[0]"),
    ({"conversation": [{"role": "wizard", "content": "hi"}]}, "conversation.messages[0].role"),
    ({"conversation": [{"role": "user", "content": "hi"}] * (MAX_MESSAGES + 1)},
     "conversation.messages"),
    ({"conversation": "hello"}, "conversation"),
    ({"conversation": [{"role": "user", "content": "hi"}], "format": "yaml"}, "format"),
    ({"conversation": [{"role": "user", "content": "hi"}], "actions": 1}, "actions"),
])
def test_bad_bodies_are_422_naming_the_field(served: Deployment, checkpoints, body, field):
    ana, client = served.account("ana")
    import_conversations(client, conversation("t1"))
    model_id = succeeded_model(served, client, ana, checkpoints["personal"], ["t1"])
    response = client.post(model_route(model_id), json=body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field, response.json()


def test_bodies_past_the_limit_and_non_json(served: Deployment, checkpoints):
    ana, client = served.account("ana")
    import_conversations(client, conversation("t1"))
    model_id = succeeded_model(served, client, ana, checkpoints["personal"], ["t1"])
    huge = {"conversation": [{"role": "user", "content": "x" * (300 * 1024)}]}
    assert client.post(model_route(model_id), json=huge).status_code == 413
    garbage = client.post(model_route(model_id), content=b"{not json",
                          headers={"Content-Type": "application/json"})
    assert garbage.status_code == 422


def test_no_scoring_server_is_503_with_retry_after(served: Deployment, checkpoints):
    ana, client = served.account("ana")
    import_conversations(client, conversation("t1"))
    model_id = succeeded_model(served, client, ana, checkpoints["personal"], ["t1"])
    body = {"conversation": conversation("t1")}
    store, objects = served.api.store, served.api.objects
    key = client.headers["Authorization"].split()[1]
    with api_server(store, objects, closed_port_url()) as url:
        response = Api(url, store, objects).client(key).post(model_route(model_id), json=body)
    assert response.status_code == 503 and response.json()["retryable"] is True
    assert int(response.headers["Retry-After"]) > 0
    assert "stash-pipeline serve" in response.json()["detail"]
    # A scoring server that answers nothing (its engine held) until the API gave up, after 1 s.
    engine = HeldEngine(batch_tokens=16384)
    with scoring_server(store, objects, engine=engine) as (scoring_url, *_), engine.held():
        with api_server(store, objects, scoring_url, scoring_timeout_s=1.0) as url:
            slow = Api(url, store, objects).client(key).post(model_route(model_id), json=body)
    assert slow.status_code == 503 and int(slow.headers["Retry-After"]) > 0, slow.text
    assert "within 1 s" in slow.json()["detail"]


def test_the_whole_reward_alone_is_one_forward(served: Deployment, checkpoints):
    """``"actions": false``: a trace longer than the window is one forward of the window (256
    tokens), and the answer has the whole reward only; its actions take windows of their own
    (one forward here too: the suite's engine holds 16,384 tokens a forward)."""
    ana, client = served.account("ana")
    import_conversations(client, conversation("t1"))
    model_id = succeeded_model(served, client, ana, checkpoints["personal"], ["t1"])
    trace = conversation("t2", text=LONG_TEXT)
    forwards, tokens = [], []
    for actions in (False, True):
        before = served.engine.stats.as_dict()
        answer = client.post(model_route(model_id), json={"conversation": trace,
                                                          "actions": actions})
        assert answer.status_code == 200, answer.text
        forwards.append(served.engine.stats.forwards - before["forwards"])
        tokens.append(served.engine.stats.tokens - before["tokens"])
        assert ("actions" in answer.json()) is actions
    assert forwards[0] == 1 and tokens[0] == 256 and tokens[1] > 3 * tokens[0]
    assert answer.json()["raw"] == pytest.approx(client.post(model_route(model_id), json={
        "conversation": trace, "actions": False}).json()["raw"], abs=1e-5)
    ranked = client.post(model_route(model_id), json={
        "context": trace["messages"][:2], "candidates": ["Yes.", "No."], "actions": False})
    assert ranked.status_code == 200, ranked.text
    assert all("actions" not in c for c in ranked.json()["candidates"])
    refused = client.post(model_route(model_id), json={"conversation": trace, "actions": "no"})
    assert refused.status_code == 422 and refused.json()["field"] == "actions"


def test_concurrent_requests_are_read_in_one_forward(served: Deployment, checkpoints):
    """Six requests sent together through the API, queued while the scoring engine is busy
    (held), are read in one batch of one forward; each answer is the one the request gets
    alone."""
    ana, client = served.account("ana")
    import_conversations(client, conversation("t1"))
    model_id = succeeded_model(served, client, ana, checkpoints["personal"], ["t1"])
    bodies = [{"conversation": conversation(f"c{i}", text=f"Refund order {i}, please.")}
              for i in range(6)]
    alone = [client.post(model_route(model_id), json=b).json() for b in bodies]
    engine = served.engine
    before = engine.stats.as_dict()
    answers: dict[int, dict] = {}
    key = client.headers["Authorization"].split()[1]

    def ask(index: int) -> None:
        with served.client(key) as own:
            answers[index] = own.post(model_route(model_id), json=bodies[index]).json()

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(bodies))]
    with engine.held():
        for thread in threads:
            thread.start()
        wait_until(lambda: engine.queued() == len(bodies), timeout_s=REQUEST_S,
                   what="the six requests to reach the scoring engine")
    for thread in threads:
        thread.join(timeout=bound(REQUEST_S))
    after = engine.stats.as_dict()
    assert after["requests"] - before["requests"] == 6
    assert after["batches"] - before["batches"] == 1
    assert after["forwards"] - before["forwards"] == 1 and after["largest_batch"] >= 6
    for index, answer in enumerate(alone):
        assert answers[index]["raw"] == pytest.approx(answer["raw"], abs=1e-5)
        assert json.dumps(sorted(a["action_id"] for a in answers[index]["actions"])) == \
            json.dumps(sorted(a["action_id"] for a in answer["actions"]))


def test_the_scoring_server_answers_only_the_api(served: Deployment, checkpoints):
    ana, client = served.account("ana")
    import_conversations(client, conversation("t1"))
    model_id = succeeded_model(served, client, ana, checkpoints["personal"], ["t1"])
    body = {"evaluator": model_id, "request": {"conversation": {
        "id": "x", "messages": [{"role": "user", "content": "hi"}]}}}
    with served.scoring_client(token="wrong") as wrong:
        assert wrong.post("/v1/rewards", json=body).status_code == 401
        assert wrong.get("/v1/models").status_code == 401
        assert wrong.get("/health").json() == {"status": "ok"}
    with served.scoring_client() as api:
        answered = api.post("/v1/rewards", json=body)
        assert answered.status_code == 200, answered.text
        assert {"evaluator": model_id, "kind": "personal", "state": "ready", "pinned": False,
                "error": None} in api.get("/v1/models").json()["models"]
        assert api.post("/v1/rewards", json={**body, "evaluator": "nothing"}).status_code == 404
        assert api.post("/v1/rewards", json={**body, "request": {}}).status_code == 422
