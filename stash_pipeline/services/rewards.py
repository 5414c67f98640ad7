"""Rewards on request, as the API and the CLI ask for them: the body read into a request
(``core.reward_requests``), and the evaluator that answers it.

A body is ``{"conversation": C}`` or ``{"context": C, "candidates": [M, ...]}``, with an optional
``"format"`` and ``"actions"`` (default true: every action's reward too; false: the whole reward
only, one forward a conversation): C is a conversation in any import format (a trace object in
OpenAI's or Anthropic's form, an OTLP export, a tau2-bench result, an AgentProcessBench record;
docs/importing.md) or a bare list of messages; each M is an assistant message in OpenAI's form
(Anthropic's when the context is in it), or a string (a text reply). The importers read them, so
a conversation scores as the same trace imported would.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.core.reward_requests import (
    MAX_CANDIDATES,
    CandidatesRequest,
    ConversationRequest,
    RewardRequest,
    check_request,
)
from stash_pipeline.core.traces import Message, Trace
from stash_pipeline.importers import FORMATS, anthropic_messages, openai_chat, read_path
from stash_pipeline.services import reward_models
from stash_pipeline.store import StatusError, Store

BODY_FIELDS = ("conversation", "context", "candidates", "format", "actions")
RELEASE = "release"  # the CLI's name of the current shared-evaluator release


def parse_body(body: Any) -> RewardRequest:
    """The request a body asks for; InputError (the API's 422) names the field."""
    if not isinstance(body, Mapping):
        raise InputError("expected a JSON object with 'conversation', or 'context' and "
                         "'candidates'", field="body")
    unknown = sorted(set(body) - set(BODY_FIELDS))
    if unknown:
        raise InputError(f"unknown field; the fields are {', '.join(BODY_FIELDS)}",
                         field=unknown[0])
    format = body.get("format", "auto")
    if format != "auto" and format not in FORMATS:
        raise InputError(f"expected auto or one of {', '.join(FORMATS)}", field="format")
    actions = body.get("actions", True)
    if not isinstance(actions, bool):
        raise InputError("expected true (every action's reward too) or false (the whole "
                         "reward only)", field="actions")
    if "conversation" in body:
        extra = [name for name in ("context", "candidates") if name in body]
        if extra:
            raise InputError("give a conversation, or a context with candidates, not both",
                             field=extra[0])
        trace, _ = read_conversation(body["conversation"], format=format, field="conversation")
        return check_request(ConversationRequest(trace, actions))
    if "context" not in body:
        raise InputError("give 'conversation', or 'context' and 'candidates'", field="conversation")
    if "candidates" not in body:
        raise InputError("give the candidate next messages to rank", field="candidates")
    return candidates_request(body["context"], body["candidates"], format=format,
                              actions=actions)


def candidates_request(context: Any, candidates: Any, *, format: str = "auto",
                       actions: bool = True) -> CandidatesRequest:
    trace, found = read_conversation(context, format=format, field="context")
    if not isinstance(candidates, list):
        raise InputError("expected a list of assistant messages", field="candidates")
    if len(candidates) > MAX_CANDIDATES:
        raise InputError(f"at most {MAX_CANDIDATES} candidates a request, got {len(candidates)}",
                         field="candidates")
    messages = tuple(read_candidate(c, format=found, field=f"candidates[{i}]")
                     for i, c in enumerate(candidates))
    return check_request(CandidatesRequest(trace, messages, actions))


def read_conversation(value: Any, *, format: str = "auto", field: str) -> tuple[Trace, str]:
    """One conversation in any import format, or a bare list of messages; (trace, format).

    The importers read it from a file, as an import would (their limits, validation and
    errors), which holds it alone: its errors name ``field`` and the field inside it.
    """
    if isinstance(value, list):
        value = {"messages": value}
    if not isinstance(value, Mapping):
        raise InputError("expected a conversation: a trace object, or a list of messages",
                         field=field)
    try:
        with tempfile.TemporaryDirectory(prefix="stash-rewards-") as folder:
            path = Path(folder) / "conversation.json"
            path.write_text(json.dumps(value), encoding="utf-8")
            records = list(read_path(path, format=format, outcome_field=None))
    except InputError as error:
        inner = f".{error.field}" if error.field else ""
        raise InputError(error.reason, field=f"{field}{inner}") from None
    except (ValueError, RecursionError) as error:  # json.dumps of what JSON parsing gave back
        raise InputError(f"cannot read it: {error}", field=field) from None
    if len(records) != 1:
        raise InputError(f"expected one conversation, got {len(records)}", field=field)
    return records[0].trace, records[0].format or "openai"


def read_candidate(value: Any, *, format: str, field: str) -> Message:
    """A candidate: a string (a text reply) or an assistant message in the context's format."""
    if isinstance(value, str):
        return Message("assistant", value)
    if not isinstance(value, Mapping):
        raise InputError("expected an assistant message or a string", field=field)
    if value.get("role", "assistant") != "assistant":
        raise InputError(f"a candidate is an assistant message, not {value.get('role')!r}",
                         field=f"{field}.role")
    message = {**value, "role": "assistant"}
    try:
        if format == "anthropic":
            converted, _ = anthropic_messages.convert_messages([message])
            return converted[0]
        return openai_chat.convert_message(message, "candidate", 0)
    except InputError as error:
        inner = error.field.removeprefix("candidate").removeprefix("messages[0]") \
            if error.field else ""
        raise InputError(error.reason, field=f"{field}{inner}") from None


def read_file(path: str | Path, *, candidates: bool, format: str = "auto"
              ) -> Iterator[RewardRequest]:
    """What ``stash-pipeline score FILE`` scores: every conversation of a file in any import
    format, or (``candidates``) the file's one JSON object ``{"context", "candidates"}``."""
    if not candidates:
        for record in read_path(path, format=format, outcome_field=None):
            yield check_request(ConversationRequest(record.trace))
        return
    try:
        body = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("no such file", file=str(path)) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"not a JSON object: {error}", file=str(path)) from None
    if not isinstance(body, dict) or set(body) - {"context", "candidates", "format"}:
        raise InputError("expected one JSON object with 'context' and 'candidates' (and "
                         "'format')", file=str(path))
    try:
        yield candidates_request(body.get("context"), body.get("candidates"),
                                 format=body.get("format", format))
    except InputError as error:
        raise error.located(file=str(path)) from None


def personal_evaluator(store: Store, owner: str, model_id: str) -> str:
    """The owner's succeeded model: NotFoundError (404) for another account's or a missing one,
    StatusError (409) for one that has not succeeded."""
    model = reward_models.get(store, owner, model_id)
    if model.status != "succeeded" or not model.checkpoint_uri:
        raise StatusError(f"reward model {model_id} is {model.status}: only a succeeded model "
                          "scores")
    return model.id


def shared_evaluator(store: Store) -> str:
    """The current release's version; NotFoundError before the first release."""
    release = store.latest_release()
    if release is None:
        raise NotFoundError("no shared evaluator release yet: the evaluator scores once the first "
                            "release is made")
    return release.version


def evaluator(store: Store, owner: str, model: str) -> str:
    """``release`` (the current release) or one of the owner's succeeded models."""
    if model == RELEASE:
        return shared_evaluator(store)
    return personal_evaluator(store, owner, model)
