"""Rewards asked for on request, for inputs that are not stored: what may be asked and its one JSON
form (what the API hands the scoring server, and the server, the CLI and the TRL reward function
hand the worker).

Two kinds:
- a **conversation**: its whole-trace reward (raw and calibrated) and, when asked (``actions``),
  every action's reward and credit, exactly the numbers stored scoring would give the same trace;
- one **context** with several **candidate** next assistant messages: each candidate is the
  conversation it completes (the context, then the candidate), scored the same way, and the
  candidates are ranked by that conversation's raw reward. Candidates share their context, so the
  worker reads it once.

The whole reward alone is one forward of at most a window per conversation; every action's costs
up to a window per action whose context does not fit one. ``actions`` says which is wanted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.serialize import (
    message_from_dict,
    message_to_dict,
    trace_from_dict,
    trace_to_dict,
)
from stash_pipeline.core.traces import Message, Trace

# Candidates one request may rank: best-of-n uses 4 to 64; more belongs in several requests.
MAX_CANDIDATES = 64
# Messages of a conversation or context: each action may need its own forward of up to a window.
MAX_MESSAGES = 1000
# What the scoring server admits, in forwards of a model's token budget (its --batch-tokens): the
# tokens one request may need (every action of a tau-bench trial is about 6.5 full windows), and
# the tokens queued or being read at once (on a CPU 32 x 1,024: about 20 s of the tiny model).
REQUEST_FORWARDS = 16
IN_FLIGHT_FORWARDS = 32


@dataclass(frozen=True)
class ConversationRequest:
    trace: Trace
    actions: bool = True  # every action's reward and credit too, not only the whole reward


@dataclass(frozen=True)
class CandidatesRequest:
    context: Trace
    candidates: tuple[Message, ...]
    actions: bool = True  # each candidate's own actions' rewards and credits too

    def completed(self, index: int) -> Trace:
        """The conversation candidate ``index`` completes: the context, then the candidate."""
        return self.context.with_messages(self.context.messages + (self.candidates[index],))


RewardRequest = ConversationRequest | CandidatesRequest


def check_request(request: RewardRequest) -> RewardRequest:
    """The limits every request keeps; InputError names the field."""
    if isinstance(request, ConversationRequest):
        _check_messages(request.trace, "conversation")
        if not request.trace.messages:
            raise InputError("a conversation needs at least one message",
                             field="conversation.messages")
        return request
    _check_messages(request.context, "context")
    if not request.candidates:
        raise InputError("give at least one candidate", field="candidates")
    if len(request.candidates) > MAX_CANDIDATES:
        raise InputError(f"at most {MAX_CANDIDATES} candidates a request, got "
                         f"{len(request.candidates)}", field="candidates")
    for index, candidate in enumerate(request.candidates):
        check_candidate(candidate, f"candidates[{index}]")
    return request


def check_candidate(message: Message, field: str) -> None:
    """A candidate is an assistant message with something to score: text or a tool call."""
    if message.role != "assistant":
        raise InputError(f"a candidate is an assistant message, not {message.role!r}",
                         field=f"{field}.role")
    if not message.content.strip() and not message.tool_calls:
        raise InputError("a candidate needs text or a tool call", field=field)


def _check_messages(trace: Trace, field: str) -> None:
    if len(trace.messages) > MAX_MESSAGES:
        raise InputError(f"at most {MAX_MESSAGES} messages, got {len(trace.messages)}",
                         field=f"{field}.messages")


def request_to_dict(request: RewardRequest) -> dict[str, Any]:
    if isinstance(request, ConversationRequest):
        return {"conversation": trace_to_dict(request.trace), "actions": request.actions}
    return {"context": trace_to_dict(request.context),
            "candidates": [message_to_dict(m) for m in request.candidates],
            "actions": request.actions}


def request_from_dict(data: Any) -> RewardRequest:
    """The JSON form back (written by ``request_to_dict``); InputError for anything else."""
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", field="body")
    actions = data.get("actions", True)
    if not isinstance(actions, bool):
        raise InputError("expected true or false", field="actions")
    try:
        if "conversation" in data:
            return check_request(ConversationRequest(trace_from_dict(data["conversation"]),
                                                     actions))
        candidates = data["candidates"]
        if not isinstance(candidates, list):
            raise InputError("expected a list of messages", field="candidates")
        return check_request(CandidatesRequest(trace_from_dict(data["context"]),
                                               tuple(message_from_dict(m) for m in candidates),
                                               actions))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise InputError(f"not a reward request in the scoring server's form: {error!r}",
                         field="body") from None


Place = tuple[int, int | None]  # (request index, candidate index or None)


def requests_for(traces: Sequence[Trace], *, actions: bool = False
                 ) -> tuple[list[RewardRequest], list[Place]]:
    """The requests that give each trace's whole-conversation raw reward (and its actions' when
    ``actions``), and where it is in their answers: (request index, candidate index, or None for
    a conversation's own ``raw``).

    Traces that end in an assistant message with something to score, after the same context, are
    candidates of one request (an RL trainer's completions of one prompt: the prompt is read
    once); the others are conversations. Either way the number is the completed conversation's.
    """
    groups: dict[str, list[int]] = {}
    out: list[RewardRequest] = []
    where: list[Place] = [(0, None)] * len(traces)
    for index, trace in enumerate(traces):
        last = trace.messages[-1] if trace.messages else None
        if (len(trace.messages) > 1 and last is not None and last.role == "assistant"
                and (last.content.strip() or last.tool_calls)):
            context = trace_to_dict(trace.with_messages(trace.messages[:-1]))
            del context["id"]
            groups.setdefault(json.dumps(context, sort_keys=True, default=str), []).append(index)
        else:
            where[index] = (len(out), None)
            out.append(ConversationRequest(trace, actions))
    for members in groups.values():
        first = traces[members[0]]
        out.append(CandidatesRequest(first.with_messages(first.messages[:-1]),
                                     tuple(traces[i].messages[-1] for i in members), actions))
        for position, index in enumerate(members):
            where[index] = (len(out) - 1, position)
    return out, where


def reward_of(answers: Sequence[dict[str, Any]], where: Place) -> dict[str, Any]:
    """The answer part (``raw``, ``calibrated``, ``actions``) ``requests_for`` placed at
    ``where``."""
    request, candidate = where
    answer = answers[request]
    return answer if candidate is None else answer["candidates"][candidate]
