"""Rewards of unsaved inputs (``core.reward_requests``), read the way stored scoring reads them.

A request is planned once (``plan``: rendering and tokenising, with the loaded checkpoint's
template, audience and window, by ``scoring.plan_trace_rows``, the planner of stored scoring),
then read together with other requests' plans (``read_plans``: one ``batching.read_rows`` call, so
concurrent requests share forwards), then answered (``Plan.answer``):

- a conversation's rows are exactly the rows a scoring job runs for that trace: its whole-trace
  reward and every action's are the numbers the job would store;
- a candidate's numbers are those of the conversation it completes, planned the same way; their
  reads are then packed together (``batching.rows_for``), so the context they share is forwarded
  once as a tree row (``readout.tree_attention``), each candidate still reading exactly the
  tokens it has alone.

Answers hold raw rewards, calibrated scores (``reward_stats.json``) and, when the request asks for
them (``actions``), every action's raw reward and credit (``action_reward_stats.json``; null for a
model trained without action comparisons). Without them a conversation is one row, cut to the
window: one forward.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from stash_pipeline.core.calibration import RewardStats, action_credit, calibrated_score
from stash_pipeline.core.reward_requests import ConversationRequest, RewardRequest
from stash_pipeline.core.traces import Trace, local_part
from stash_pipeline.worker.batching import Row, read_rows, rows_for
from stash_pipeline.worker.modeling import scoring_precision
from stash_pipeline.worker.readout import pools_last_token
from stash_pipeline.worker.render import Audience
from stash_pipeline.worker.scoring import TRACE, plan_trace_rows


class LoadedModel(Protocol):
    """What a plan and a read need of a loaded checkpoint (``scoring.RewardModel`` has it)."""

    model: Any
    tokenizer: Any
    audience: Audience
    reward_stats: RewardStats
    action_reward_stats: RewardStats | None
    device: str
    score_dtype: str


_request_ids = itertools.count()


@dataclass
class Plan:
    """One request's reads: ``rows`` run as planned (a conversation), ``sequences`` packed with
    the other plans' before they run (candidates' reads, by key); ``answer`` turns the rewards of
    both into the request's answer. ``tokens``: what it adds to a forward's budget."""

    rows: list[Row]
    sequences: dict[Hashable, tuple[int, ...]]
    tokens: int
    build: Callable[[Callable[[Hashable], float]], dict[str, Any]] = field(repr=False)

    def answer(self, rewards: Mapping[Hashable, float]) -> dict[str, Any]:
        def reward(key: Hashable) -> float:
            sequence = self.sequences.get(key)
            return rewards[key if sequence is None else sequence]
        return self.build(reward)


def plan(loaded: LoadedModel, request: RewardRequest) -> Plan:
    """Render and tokenise ``request`` for ``loaded`` (not thread-safe: a tokenizer changes its
    truncation settings per call, so one thread plans for a model at a time)."""
    # Read keys name traces: each request's get an id of their own, so plans read together never
    # share a key (the caller's ids, and its action ids, come back local: m<i>, m<i>.call<k>).
    prefix = f"request-{next(_request_ids)}"
    one_pass = pools_last_token(loaded.model)
    actions = request.actions
    if isinstance(request, ConversationRequest):
        trace = replace(request.trace, id=prefix)
        trace_plan = plan_trace_rows(loaded.tokenizer, [trace], loaded.audience,
                                     actions=actions, one_pass=one_pass)
        return Plan(trace_plan.rows, {}, sum(len(row.ids) for row in trace_plan.rows),
                    lambda reward: _conversation_answer(loaded, trace, reward, actions))
    completed = [replace(request.completed(i), id=f"{prefix}.{i}")
                 for i in range(len(request.candidates))]
    trace_plan = plan_trace_rows(loaded.tokenizer, completed, loaded.audience, actions=actions,
                                 one_pass=one_pass)
    wanted = {(TRACE, trace.id) for trace in completed} | {
        action.id for trace in completed for action in trace.actions()
        if actions and action.message_index == len(request.context.messages)}
    sequences = {key: row.ids[: position + 1] for row in trace_plan.rows
                 for position, key in row.reads if key in wanted}
    packed = rows_for(loaded.model, sequences.values())
    return Plan([], sequences, sum(len(row.ids) for row in packed),
                lambda reward: _candidates_answer(loaded, completed, reward, actions))


def least_tokens(loaded: LoadedModel, request: RewardRequest) -> int:
    """A lower bound of the tokens ``plan`` gives ``request``, found in time linear in its text.

    Planning every action renders each one's context (quadratic in the conversation), so the
    engine asks this first and refuses what is certainly over its limit unplanned: an action
    whose context holds more non-blank characters than a window of the vocabulary's longest
    tokens could cover is read in a window of its own. The whole reward alone needs one window
    at most, counted as none here."""
    if not request.actions:
        return 0
    window = loaded.tokenizer.model_max_length
    reach = window * _longest_token(loaded.tokenizer)
    if isinstance(request, ConversationRequest):
        return window * _long_actions(request.trace.messages, reach)
    context = _solid_characters(request.context.messages)
    return window * sum(_long_actions((candidate,), reach, context)
                        for candidate in request.candidates)


def _long_actions(messages: Sequence[Any], reach: int, seen: int = 0) -> int:
    """How many actions of ``messages`` have more than ``reach`` non-blank characters of their
    messages' text before their end (``seen`` before the first)."""
    found = 0
    for message in messages:
        seen += _solid_characters((message,), calls=False)
        if message.role == "assistant" and message.content.strip():
            found += seen > reach
        for call in message.tool_calls:
            seen += _solid(call.name) + _solid(json.dumps(call.arguments, ensure_ascii=False))
            found += seen > reach
    return found


def _solid_characters(messages: Sequence[Any], *, calls: bool = True) -> int:
    return sum(_solid(m.content) + (sum(_solid(c.name) + _solid(json.dumps(
        c.arguments, ensure_ascii=False)) for c in m.tool_calls) if calls else 0)
        for m in messages if m.role != "system")


def _solid(text: str) -> int:
    return len("".join(text.split()))


def _longest_token(tokenizer: Any) -> int:
    """The most characters one token of the vocabulary holds (cached on the tokenizer)."""
    longest = tokenizer.__dict__.get("_stash_longest_token")
    if longest is None:
        longest = tokenizer.__dict__["_stash_longest_token"] = max(
            (len(token) for token in tokenizer.get_vocab()), default=1)
    return max(1, longest)


def read_plans(loaded: LoadedModel, plans: Sequence[Plan], *, batch_tokens: int | None = None,
               on_batch: Callable[[Sequence[Hashable], int], None] | None = None
               ) -> dict[Hashable, float]:
    """Every read of ``plans`` in one ``read_rows`` call, in the checkpoint's scoring precision
    (bf16 autocast on an accelerator, as stored scoring): conversations' rows as planned, and
    all candidates' sequences packed together. ``on_batch`` follows each forward."""
    rows = [row for p in plans for row in p.rows]
    sequences = {sequence for p in plans for sequence in p.sequences.values()}
    if sequences:
        rows += rows_for(loaded.model, sequences)
    with scoring_precision(loaded.score_dtype, loaded.device):
        return read_rows(loaded.model, rows, pad_id=loaded.tokenizer.pad_token_id,
                         batch_tokens=batch_tokens, on_batch=on_batch)


def score_requests(loaded: LoadedModel, requests: Sequence[RewardRequest], *,
                   batch_tokens: int | None = None) -> list[dict[str, Any]]:
    """The answers to ``requests``, read together (the CLI and the TRL reward function)."""
    plans = [plan(loaded, request) for request in requests]
    rewards = read_plans(loaded, plans, batch_tokens=batch_tokens)
    return [p.answer(rewards) for p in plans]


def _conversation_answer(loaded: LoadedModel, trace: Trace,
                         reward: Callable[[Hashable], float], actions: bool) -> dict[str, Any]:
    raw = reward((TRACE, trace.id))
    answer = {"raw": raw, "calibrated": calibrated_score(raw, loaded.reward_stats)}
    if actions:
        answer["actions"] = _actions(loaded, trace, reward, trace.actions())
    return answer


def _candidates_answer(loaded: LoadedModel, completed: Sequence[Trace],
                       reward: Callable[[Hashable], float], actions: bool) -> dict[str, Any]:
    candidates = []
    for index, trace in enumerate(completed):
        raw = reward((TRACE, trace.id))
        candidate = {"index": index, "raw": raw,
                     "calibrated": calibrated_score(raw, loaded.reward_stats)}
        if actions:
            last = len(trace.messages) - 1
            own = [a for a in trace.actions() if a.message_index == last]
            candidate["actions"] = _actions(loaded, trace, reward, own)
        candidates.append(candidate)
    # Best first; equal rewards keep the candidates' order.
    ranking = sorted(range(len(candidates)), key=lambda i: (-candidates[i]["raw"], i))
    for rank, index in enumerate(ranking, start=1):
        candidates[index]["rank"] = rank
    return {"candidates": candidates, "ranking": ranking}


def _actions(loaded: LoadedModel, trace: Trace, reward: Callable[[Hashable], float],
             actions: Sequence[Any]) -> list[dict[str, Any]]:
    stats = loaded.action_reward_stats
    out = []
    for action in actions:
        raw = reward(action.id)
        out.append({"action_id": local_part(action.id, trace.id), "tool_call": action.is_tool_call,
                    "raw": raw, "credit": None if stats is None else action_credit(raw, stats)})
    return out
