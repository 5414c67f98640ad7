"""OpenRLHF's remote reward model protocol on the scoring server: queries read back into
conversations and scored as the API scores them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.traces import Message, ToolCall
from stash_pipeline.serving import openrlhf
from stash_pipeline.serving.bodies import GetRewardCall
from stash_pipeline.worker.scoring import RewardModel
from stash_pipeline_tests.support.held_engine import HeldEngine
from stash_pipeline_tests.support.serving_helpers import (
    Deployment,
    conversation,
    import_conversations,
    release,
    scoring_server,
    succeeded_model,
)
from stash_pipeline_tests.support.waiting import REQUEST_S, bound, wait_until

QWEN_QUERY = (
    "<|im_start|>system\nYou are helpful.<|im_end|>\n"
    "<|im_start|>user\nRefund order 7<|im_end|>\n"
    "<|im_start|>assistant\n<think>\nThe user wants a refund.\n</think>\n\nChecking.\n"
    "<tool_call>\n{\"name\": \"get_order\", \"arguments\": {\"order_id\": 7}}\n</tool_call>"
    "<|im_end|>\n"
    "<|im_start|>user\n<tool_response>\n{\"status\": \"delivered\"}\n</tool_response>"
    "<|im_end|>\n"
    "<|im_start|>assistant\nRefunded.<|im_end|><|endoftext|><|endoftext|>"
)


def test_chatml_queries_read_back_into_messages():
    trace = openrlhf.query_trace(QWEN_QUERY, None, "query[0]")
    assert trace.messages == (
        Message("system", "You are helpful."), Message("user", "Refund order 7"),
        Message("assistant", "Checking.", (ToolCall("call0", "get_order", {"order_id": 7}),)),
        Message("tool", "{\"status\": \"delivered\"}"), Message("assistant", "Refunded."))


def test_json_and_prompted_text_queries():
    as_json = openrlhf.query_trace('[{"role": "user", "content": "Hi"}, '
                                   '{"role": "assistant", "content": "Hello."}]', None, "q")
    assert [m.role for m in as_json.messages] == ["user", "assistant"]
    text = openrlhf.query_trace("<s>Question: 2+2? Answer: 4</s>", "Question: 2+2?", "q")
    assert text.messages == (Message("user", "Question: 2+2?"), Message("assistant", " Answer: 4"))
    for query, prompt in (("just words", None), ("just words", "other"), ("{broken", None)):
        with pytest.raises(InputError) as caught:
            openrlhf.query_trace(query, prompt, "query[3]")
        assert caught.value.field == "query[3]"
    with pytest.raises(InputError, match="tool_call"):
        openrlhf.query_trace("<|im_start|>assistant\n<tool_call>\nnot json\n</tool_call>",
                             None, "q")


def test_prompts_are_one_per_query():
    call = GetRewardCall(query=["a", "b"], prompts=["a", 7])
    assert openrlhf.queries(call) == (["a", "b"], ["a", None])
    assert openrlhf.queries(GetRewardCall(query=["a"])) == (["a"], [None])
    with pytest.raises(InputError) as caught:
        openrlhf.queries(GetRewardCall(query=["a", "b"], prompts=["a"]))
    assert caught.value.field == "prompts"


@pytest.mark.slow
def test_get_reward_answers_openrlhf_with_the_apis_numbers(served: Deployment, checkpoints):
    """The body OpenRLHF's agent executor posts ({"query", "prompts", "labels"}): queries rendered
    by a policy that uses the model's own template, and two responses to one prompt; the rewards
    are the API's raw rewards of the same conversations, the scores their calibrated ones."""
    ana, client = served.account("ana")
    trace = conversation("t1")
    import_conversations(client, trace)
    model_id = succeeded_model(served, client, ana, checkpoints["personal"], ["t1"])
    loaded = RewardModel(checkpoints["personal"], device="cpu")
    from stash_pipeline.services.rewards import read_conversation

    rendered = loaded.render(read_conversation(trace, field="t")[0])
    prompt = "<|im_start|>user\nRefund order 7, please.<|im_end|>\n<|im_start|>assistant\n"
    replies = ["<think>\n\n</think>\n\nChecking the order.", "<think>\n\n</think>\n\nNo."]
    queries = [rendered] + [prompt + r + "<|im_end|>" for r in replies]
    store, objects = served.api.store, served.api.objects
    with scoring_server(store, objects, openrlhf_models=(model_id,)) as (url, engine, _):
        response = httpx.post(f"{url}/get_reward", json={
            "query": queries, "prompts": [None, prompt, prompt], "labels": [None] * 3},
            headers={"Content-Type": "application/json"}, timeout=bound(REQUEST_S))
        assert response.status_code == 200, response.text
        answer = response.json()
        assert set(answer) == {"rewards", "scores", "extra_logs"}
        assert engine.stats.requests == 2  # the conversation, and one context's two candidates
    expected = [client.post(f"/api/v1/rm/reward-models/{model_id}/rewards", json={
        "conversation": body}).json() for body in (trace, *[
            [{"role": "user", "content": "Refund order 7, please."},
             {"role": "assistant", "content": text}] for text in ("Checking the order.", "No.")])]
    assert answer["rewards"] == pytest.approx([e["raw"] for e in expected], abs=1e-5)
    assert answer["scores"] == pytest.approx([e["calibrated"] for e in expected], abs=1e-6)


@pytest.mark.slow
def test_get_reward_needs_a_chosen_model(served: Deployment, checkpoints):
    store, objects = served.api.store, served.api.objects
    with scoring_server(store, objects) as (url, *_):
        response = httpx.post(f"{url}/get_reward", json={"query": ["hi"]}, timeout=bound(REQUEST_S))
        assert response.status_code == 404 and "--openrlhf-model" in response.json()["detail"]
    version = release(served, checkpoints["shared"])
    with scoring_server(store, objects, openrlhf_models=("release",)) as (url, _, registry):
        registry.refresh()
        response = httpx.post(f"{url}/get_reward", timeout=bound(REQUEST_S), json={
            "query": ["<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>"]})
        assert response.status_code == 200, response.text
        assert registry.release == version and len(response.json()["rewards"]) == 1


@pytest.mark.slow
def test_get_reward_is_as_hardened_as_the_api(served: Deployment):
    """The API's body limit (STASH_REWARDS_MAX_BYTES), a nesting limit (4xx, never 500), an
    optional key, request ids, and a bind to loopback unless told otherwise."""
    from stash_pipeline.cli import build_parser

    assert build_parser().parse_args(["serve"]).host == "127.0.0.1"
    store, objects = served.api.store, served.api.objects
    body = {"query": ["<|im_start|>user\nHi<|im_end|>"]}
    with scoring_server(store, objects, openrlhf_models=("release",), openrlhf_key="secret",
                        max_body_bytes=64 * 1024) as (url, *_):
        with httpx.Client(base_url=url, timeout=120) as anyone:
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                refused = anyone.post("/get_reward", json=body, headers=headers)
                assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == \
                    "Bearer", refused.text
        with httpx.Client(base_url=url, timeout=120,
                          headers={"Authorization": "Bearer secret"}) as keyed:
            large = keyed.post("/get_reward", json={"query": ["x" * (70 * 1024)]})
            assert large.status_code == 413, large.text
            for depth in (30_000, 200):  # past the recursion limit, and past ours
                deep = keyed.post("/get_reward", content=b'{"query": ' + b"[" * depth
                                  + b"]" * depth + b"}",
                                  headers={"Content-Type": "application/json"})
                assert deep.status_code == 422 and deep.json()["field"] == "body", deep.text
            typed = keyed.post("/get_reward", json={"query": "one"})
            assert typed.status_code == 422 and typed.json()["field"] == "query", typed.text
            named = keyed.post("/get_reward", json={"query": [1]},
                               headers={"X-Request-ID": "trainer-7.step-3"})
            assert named.status_code == 422 and named.headers["X-Request-ID"] == "trainer-7.step-3"
            assert len(keyed.get("/health").headers["X-Request-ID"]) == 32


@pytest.mark.slow
def test_get_reward_serves_several_models_in_batches_of_any_size(served: Deployment,
                                                                 checkpoints):
    """1,030 queries (103 prompts, 10 replies each: 103 requests of candidates) in one body, read
    in waves the engine admits; each model named in the path; raw or calibrated rewards."""
    ana, client = served.account("ana")
    import_conversations(client, conversation("t1"))
    model_id = succeeded_model(served, client, ana, checkpoints["personal"], ["t1"])
    version = release(served, checkpoints["shared"])
    prompts = [f"<|im_start|>user\nRefund order {p}, please.<|im_end|>\n<|im_start|>assistant\n"
               for p in range(103)]
    queries = [prompt + f"Reply {r}.<|im_end|>" for prompt in prompts for r in range(10)]
    store, objects = served.api.store, served.api.objects
    engine = HeldEngine(max_tokens_in_flight=400)
    with scoring_server(store, objects, engine=engine,
                        openrlhf_models=(model_id, "release")) as (url, _, registry):
        registry.refresh()
        with httpx.Client(base_url=url, timeout=600) as trainer:
            # Held until the budget refused a wave (an event, whatever the machine's load), then
            # read: the rest of the batch is admitted as the tokens in flight are read.
            # (The engine is let go before the pool waits for the request's thread.)
            with ThreadPoolExecutor(1) as pool:
                with engine.held():
                    sent = pool.submit(trainer.post, "/get_reward", json={"query": queries})
                    wait_until(lambda: engine.stats.refused > 0 or sent.done(),
                               timeout_s=REQUEST_S, what="the engine's budget to refuse a wave")
                batch = sent.result()
            assert batch.status_code == 200, batch.text
            assert engine.stats.requests == 103 and engine.stats.refused > 0
            rewards = batch.json()["rewards"]
            assert len(rewards) == len(queries) == len(batch.json()["scores"])
            alone = trainer.post(f"/get_reward/{model_id}", json={"query": queries[517:518]})
            assert alone.json()["rewards"] == pytest.approx(rewards[517:518], abs=1e-5)
            calibrated = trainer.post(f"/get_reward/{model_id}?output=calibrated",
                                      json={"query": queries[:20]}).json()
            assert calibrated["rewards"] == calibrated["scores"] == pytest.approx(
                batch.json()["scores"][:20], abs=1e-6)
            shared = trainer.post("/get_reward/release", json={"query": queries[:20]})
            assert shared.status_code == 200 and registry.release == version
            assert shared.json()["rewards"] != pytest.approx(rewards[:20], abs=1e-3)
            unknown = trainer.post("/get_reward/other", json={"query": queries[:1]})
            assert unknown.status_code == 404 and model_id in unknown.json()["detail"]
            bad = trainer.post("/get_reward?output=probability", json={"query": queries[:1]})
            assert bad.status_code == 422 and bad.json()["field"] == "output"
