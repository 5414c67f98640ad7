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
from stash_pipeline.worker import serving
from stash_pipeline.worker.rewards import least_tokens, plan, read_plans, score_requests
from stash_pipeline.worker.scoring import RewardModel, score_traces_and_actions
from stash_pipeline.worker.serving import Engine, EngineBusy, ModelNotLoaded, RequestTooLarge
from stash_pipeline_tests.support.held_engine import HeldEngine
from stash_pipeline_tests.support.tiny_models import random_head_checkpoint
from stash_pipeline_tests.support.waiting import REQUEST_S, bound, wait_until

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


def test_the_whole_reward_alone_is_one_forward(loaded, tau2_sample, context):
    """Without actions a long trace (every action of which needs windows of its own) is one
    forward of one window, and its reward is the one the full request gives; candidates are
    their whole conversations' reads only."""
    trace = tau2_sample[0]
    counted = []
    whole = plan(loaded, ConversationRequest(trace, actions=False))
    rewards = read_plans(loaded, [whole], on_batch=lambda _keys, n: counted.append(n))
    answer = whole.answer(rewards)
    assert len(counted) == 1 and counted[0] == loaded.tokenizer.model_max_length
    assert set(answer) == {"raw", "calibrated"}
    every = plan(loaded, ConversationRequest(trace))
    assert every.tokens > 4 * whole.tokens
    assert answer["raw"] == pytest.approx(every.answer(read_plans(loaded, [every]))["raw"],
                                          abs=1e-5)
    ranked = score_requests(loaded, [CandidatesRequest(context, CANDIDATES, actions=False)])[0]
    full = score_requests(loaded, [CandidatesRequest(context, CANDIDATES)])[0]
    assert all("actions" not in c for c in ranked["candidates"])
    assert ranked["ranking"] == full["ranking"]
    assert [c["raw"] for c in ranked["candidates"]] == pytest.approx(
        [c["raw"] for c in full["candidates"]], abs=1e-5)


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
            answers[index] = engine.score("m", ConversationRequest(traces[index]))

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(traces))]
        with engine.held():
            for thread in threads:
                thread.start()
            wait_until(lambda: engine.queued() == len(traces), timeout_s=REQUEST_S,
                       what="every request to be queued")
        for thread in threads:
            thread.join(timeout=bound(REQUEST_S))
        assert engine.stats.as_dict() | {"tokens": 0} == {
            "requests": 6, "batches": 1, "forwards": 1, "tokens": 0, "largest_batch": 6,
            "refused": 0, "cancelled": 0}
        assert engine.tokens_in_flight == 0 and engine.tokens_per_s > 0
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
            futures = [engine.submit("m", ConversationRequest(t)) for t in traces]
        assert all(f.result(timeout=bound(REQUEST_S))["raw"] for f in futures)
        assert engine.stats.batches == 2 and engine.stats.largest_batch == 2
    finally:
        engine.close()


def test_the_engine_admits_by_tokens_and_refuses_before_any_work(loaded, context):
    """A request over the per-request limit is an input error; one that would take the tokens in
    flight past their limit, or be answered after its horizon at the measured rate, is busy with
    the seconds after which it fits; a cancelled request leaves the queue unread."""
    request = ConversationRequest(context)
    tokens = plan(loaded, request).tokens
    engine = Engine(gather_s=0.0, max_tokens_in_flight=tokens)
    engine.add_model("m", loaded)
    try:
        with pytest.raises(ModelNotLoaded):
            engine.submit("other", request)
        engine.score("m", request)  # one read: the rate is measured
        assert engine.tokens_per_s > 0
        engine.gather_s = 3600.0  # nothing more is read while the test looks
        waiting = engine.submit("m", request)
        with pytest.raises(EngineBusy, match="tokens are being read or waiting") as busy:
            engine.submit("m", request)
        assert 1 <= busy.value.retry_after_s <= 60
        engine.max_tokens_in_flight = 10 * tokens
        with pytest.raises(EngineBusy, match="would come after"):
            engine.submit("m", request, horizon_s=tokens / engine.tokens_per_s)
        assert engine.tokens_in_flight == tokens
        waiting.cancel()
        assert engine.tokens_in_flight == 0
        engine.max_request_tokens = tokens - 1
        with pytest.raises(RequestTooLarge, match="whole reward only") as large:
            engine.submit("m", request)
        assert large.value.field == "conversation"
        assert engine.stats.as_dict() | {"tokens": 0} == {
            "requests": 1, "batches": 1, "forwards": 1, "tokens": 0, "largest_batch": 1,
            "refused": 3, "cancelled": 1}
    finally:
        engine.close()


def test_the_bound_before_planning_never_exceeds_the_plan(loaded, tau2_sample, context):
    """``least_tokens`` is a lower bound of what planning finds (real traces, their actions and
    not, candidates), and not a trivial one once a conversation is long: its late actions each
    count a window."""
    long = tau2_sample[2].with_messages(tau2_sample[2].messages * 4)
    bounds = []
    for trace in [*tau2_sample, long]:
        for request in (ConversationRequest(trace), ConversationRequest(trace, actions=False)):
            bounds.append(least_tokens(loaded, request))
            assert bounds[-1] <= plan(loaded, request).tokens
    candidates = CandidatesRequest(long, CANDIDATES)
    assert 0 < least_tokens(loaded, candidates) <= plan(loaded, candidates).tokens
    assert least_tokens(loaded, CandidatesRequest(context, CANDIDATES)) == 0
    assert bounds[-1] == 0 and bounds[-2] >= 10 * loaded.tokenizer.model_max_length


def test_what_is_certainly_too_large_is_refused_unplanned(loaded, tau2_sample, monkeypatch):
    planned = []
    monkeypatch.setattr(serving, "plan", lambda *a: planned.append(a) or plan(*a))
    trace = tau2_sample[0]
    request = ConversationRequest(trace.with_messages(trace.messages * 4))
    engine = Engine(max_request_tokens=least_tokens(loaded, request) - 1)
    engine.add_model("m", loaded)
    try:
        with pytest.raises(RequestTooLarge, match="at least"):
            engine.submit("m", request)
        assert planned == [] and engine.stats.refused == 1
    finally:
        engine.close()


def test_a_batch_whose_callers_all_left_stops_between_forwards(loaded, tau2_sample):
    """A long trace's every action: many forwards of one window each; cancelled once the first
    is read, the rest are never run."""
    request = ConversationRequest(tau2_sample[0])
    window = loaded.tokenizer.model_max_length
    engine = Engine(batch_tokens=window, gather_s=0.0)
    engine.add_model("m", loaded)
    try:
        forwards = len(plan(loaded, request).rows)
        assert forwards > 4
        future = engine.submit("m", request)
        wait_until(lambda: engine.stats.forwards >= 1 or future.done(), timeout_s=REQUEST_S,
                   what="the first forward")
        assert future.cancel()
        wait_until(lambda: engine.tokens_in_flight == 0, timeout_s=REQUEST_S,
                   what="the batch to stop")
        assert engine.stats.cancelled == 1 and engine.stats.requests == 0
        assert engine.stats.forwards < forwards
    finally:
        engine.close()

