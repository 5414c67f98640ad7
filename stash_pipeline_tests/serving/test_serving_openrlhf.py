"""OpenRLHF's remote reward model protocol on the scoring server: queries read back into
conversations and scored as the API scores them."""

from __future__ import annotations

import httpx
import pytest

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.traces import Message, ToolCall
from stash_pipeline.serving import openrlhf
from stash_pipeline.worker.scoring import RewardModel
from stash_pipeline_tests.support.serving_helpers import (
    Deployment,
    conversation,
    import_conversations,
    release,
    scoring_server,
    succeeded_model,
)
from stash_pipeline_tests.support.waiting import REQUEST_S, bound

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


@pytest.mark.parametrize("body, field", [
    ([], "body"), ({"query": "one"}, "query"), ({"query": [1]}, "query"),
    ({"query": ["a", "b"], "prompts": ["a"]}, "prompts"),
])
def test_bad_get_reward_bodies(body, field):
    with pytest.raises(InputError) as caught:
        openrlhf.parse_body(body)
    assert caught.value.field == field


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
    with scoring_server(store, objects, openrlhf_model=model_id) as (url, engine, _):
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
    with scoring_server(store, objects, openrlhf_model="release") as (url, _, registry):
        registry.refresh()
        response = httpx.post(f"{url}/get_reward", timeout=bound(REQUEST_S), json={
            "query": ["<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>"]})
        assert response.status_code == 200, response.text
        assert registry.release == version and len(response.json()["rewards"]) == 1
