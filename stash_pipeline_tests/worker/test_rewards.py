"""Rewards of unsaved requests (worker/rewards.py) and the engine that batches them
(worker/serving.py): the numbers stored scoring gives, candidates reading their context once, and
concurrent requests sharing forwards."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from stash_pipeline.core.calibration import action_credit, calibrated_score
from stash_pipeline.core.reward_requests import CandidatesRequest, ConversationRequest
from stash_pipeline.core.traces import Message, ToolCall
from stash_pipeline.worker.rewards import plan, read_plans, score_requests
from stash_pipeline.worker.scoring import RewardModel, score_traces_and_actions
from stash_pipeline.worker.serving import DeadlinePassed, EngineBusy, ModelNotLoaded
from stash_pipeline_tests.support.held_engine import HeldEngine
from stash_pipeline_tests.support.tiny_models import random_head_checkpoint
from stash_pipeline_tests.support.waiting import PATIENT_S, REQUEST_S, bound, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def loaded(tiny_base_model, tmp_path_factory):
    return RewardModel(random_head_checkpoint(
        tiny_base_model, tmp_path_factory.mktemp("rewards") / "reward-model"), device="cpu")


@pytest.fixture(scope="module")
def without_action_stats(tiny_base_model, tmp_path_factory):
    return RewardModel(random_head_checkpoint(
        tiny_base_model, tmp_path_factory.mktemp("no-actions") / "reward-model", actions=False),
        device="cpu")


@pytest.fixture(scope="module")
def context(synthetic_pairs):
    """A short conversation (it fits the window) that asks for a flight: the candidates' context."""
    trace = synthetic_pairs(0, 1)[0].chosen.trace
    return trace.with_messages(trace.messages[:1])


CANDIDATES = (
    Message("assistant", "Let me look that flight up."),
    Message("assistant", "", tool_calls=(ToolCall("c1", "search_direct_flight",
                                                  {"destination": "Paris"}),)),
    Message("assistant", "Searching now.", tool_calls=(
        ToolCall("c2", "search_direct_flight", {"destination": "Paris"}),)),
    Message("assistant", "Let me look that flight up."),  # the same as the first: a tie
)


def test_a_conversation_gets_the_numbers_stored_scoring_gives(loaded, tau2_sample,
                                                              synthetic_pairs):
    """Long traces (windows: the beginning cut) and short ones, read in one call: raw rewards
    equal the scoring job's, calibrated scores and credits its formulas of them."""
    traces = tau2_sample[:2] + [p.chosen.trace for p in synthetic_pairs(10, 2)]
    stored_whole, stored_actions = score_traces_and_actions(loaded.model, loaded.tokenizer,
                                                            traces, loaded.audience)
    answers = score_requests(loaded, [ConversationRequest(t) for t in traces])
    for trace, answer in zip(traces, answers):
        assert answer["raw"] == stored_whole[trace.id]
        assert answer["calibrated"] == calibrated_score(answer["raw"], loaded.reward_stats)
        assert [a["action_id"] for a in answer["actions"]] == [a.local_id
                                                                for a in trace.actions()]
        for action in answer["actions"]:
            assert action["raw"] == stored_actions[f"{trace.id}/{action['action_id']}"]
            assert action["credit"] == action_credit(action["raw"],
                                                     loaded.action_reward_stats)


def test_candidates_score_as_the_conversations_they_complete(loaded, context):
    request = CandidatesRequest(context, CANDIDATES)
    answer = score_requests(loaded, [request])[0]
    completed = [replace(request.completed(i), id=f"c{i}") for i in range(len(CANDIDATES))]
    whole, actions = score_traces_and_actions(loaded.model, loaded.tokenizer, completed,
                                              loaded.audience)
    for index, candidate in enumerate(answer["candidates"]):
        assert candidate["index"] == index
        assert candidate["raw"] == pytest.approx(whole[f"c{index}"], abs=1e-5)
        own = [a for a in completed[index].actions() if a.message_index == len(context.messages)]
        assert [a["action_id"] for a in candidate["actions"]] == [a.local_id for a in own]
        for action in candidate["actions"]:
            assert action["raw"] == pytest.approx(actions[f"c{index}/{action['action_id']}"],
                                                  abs=1e-5)
    raws = [c["raw"] for c in answer["candidates"]]
    assert answer["ranking"] == sorted(range(4), key=lambda i: (-raws[i], i))
    assert [answer["candidates"][i]["rank"] for i in answer["ranking"]] == [1, 2, 3, 4]
    assert raws[0] == raws[3] and answer["ranking"].index(0) < answer["ranking"].index(3)


def test_candidates_read_their_shared_context_once(loaded, context):
    """Packed as tree rows, the candidates forward fewer tokens than their conversations apart
    (each one's own rows, as stored scoring plans them)."""
    def forwarded(plans):
        tokens = []
        read_plans(loaded, plans, on_batch=lambda _keys, n: tokens.append(n))
        return sum(tokens)

    together = forwarded([plan(loaded, CandidatesRequest(context, CANDIDATES))])
    apart = forwarded([plan(loaded, ConversationRequest(replace(context.with_messages(
        context.messages + (c,)), id=f"c{i}"))) for i, c in enumerate(CANDIDATES)])
    context_tokens = len(loaded.tokenizer(loaded.render(context))["input_ids"])
    # The duplicate candidate is read once too; the context of the other three is not repeated.
    assert together <= apart - 3 * (context_tokens - 8)


def test_a_model_without_action_stats_gives_no_credit(without_action_stats, context):
    answer = score_requests(without_action_stats, [CandidatesRequest(context, CANDIDATES[:2])])[0]
    assert all(a["credit"] is None and isinstance(a["raw"], float)
               for c in answer["candidates"] for a in c["actions"])


def test_concurrent_requests_share_one_forward(loaded, synthetic_pairs):
    """Requests submitted from several threads while the engine is busy (held) are read in one
    batch of one forward, and each gets the answer it gets alone."""
    traces = [p.chosen.trace for p in synthetic_pairs(20, 6)]
    alone = [score_requests(loaded, [ConversationRequest(t)])[0] for t in traces]
    engine = HeldEngine(batch_tokens=16384)
    engine.add_model("m", loaded)
    answers: dict[int, dict] = {}
    try:
        def ask(index: int) -> None:
            answers[index] = engine.score("m", ConversationRequest(traces[index]),
                                          timeout_s=bound(PATIENT_S))

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(traces))]
        with engine.held():
            for thread in threads:
                thread.start()
            wait_until(lambda: engine.queued() == len(traces), timeout_s=REQUEST_S,
                       what="every request to be queued")
        for thread in threads:
            thread.join(timeout=bound(REQUEST_S))
        assert engine.stats.as_dict() | {"tokens": 0} == {
            "requests": 6, "batches": 1, "forwards": 1, "tokens": 0, "largest_batch": 6}
        for index, answer in enumerate(alone):
            assert answers[index]["raw"] == pytest.approx(answer["raw"], abs=1e-5)
            assert [a["raw"] for a in answers[index]["actions"]] == pytest.approx(
                [a["raw"] for a in answer["actions"]], abs=1e-5)
    finally:
        engine.close()


def test_a_batch_gathers_requests_up_to_the_token_budget(loaded, synthetic_pairs):
    traces = [p.chosen.trace for p in synthetic_pairs(30, 4)]
    tokens = max(plan(loaded, ConversationRequest(t)).tokens for t in traces)
    engine = HeldEngine(batch_tokens=2 * tokens)
    engine.add_model("m", loaded)
    try:
        with engine.held():
            futures = [engine.submit("m", ConversationRequest(t), timeout_s=bound(PATIENT_S))
                       for t in traces]
        assert all(f.result(timeout=bound(REQUEST_S))["raw"] for f in futures)
        assert engine.stats.batches == 2 and engine.stats.largest_batch == 2
    finally:
        engine.close()


def test_the_engine_refuses_what_it_cannot_answer_in_time(loaded, context):
    """A full queue refuses at once; a request whose time limit (50 ms) is shorter than the
    engine's gathering time (0.3 s) passes it while queued, and is answered so unread."""
    engine = HeldEngine(gather_s=0.3, max_queue=1)
    engine.add_model("m", loaded)
    try:
        with pytest.raises(ModelNotLoaded):
            engine.submit("other", ConversationRequest(context), timeout_s=5)
        with engine.held():  # the late request stays queued, the queue full
            late = engine.submit("m", ConversationRequest(context), timeout_s=0.05)
            with pytest.raises(EngineBusy, match="waiting"):
                engine.submit("m", ConversationRequest(context), timeout_s=5)
        with pytest.raises(DeadlinePassed):
            late.result(timeout=bound(REQUEST_S))
        assert engine.stats.requests == 1 and engine.stats.batches == 0
    finally:
        engine.close()

