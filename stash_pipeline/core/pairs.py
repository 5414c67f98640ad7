"""The preference pair (DESIGN §4): (context, chosen, rejected) plus full provenance."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from stash_pipeline.core.serialize import trace_from_dict, trace_to_dict
from stash_pipeline.core.traces import STASH_NAMESPACE, Message, ToolCall, Trace

PairKind = Literal["action", "trace"]
SourceKind = Literal[
    "step_rating", "trace_rating", "comment", "correction", "assessment",
    "reviewed_comparison", "verified_outcome",
]
SOURCE_KINDS: tuple[str, ...] = (
    "step_rating", "trace_rating", "comment", "correction", "assessment",
    "reviewed_comparison", "verified_outcome",
)
# Sources an LLM interprets (extraction); the rest are built deterministically.
EXTRACTED_SOURCES: tuple[str, ...] = ("comment", "correction", "assessment")


@dataclass(frozen=True)
class PairSide:
    """One side of a comparison, as the model reads it.

    ``trace`` is the whole trace for a trace comparison, and for an action comparison the trace cut
    right after the action (``action_messages``): its last message ends with the action, which may
    be a generated alternative. ``action_id`` names the action (None for whole traces).
    """

    trace: Trace
    action_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"trace": trace_to_dict(self.trace), "action_id": self.action_id}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PairSide:
        return cls(trace_from_dict(data["trace"]), data.get("action_id"))


@dataclass(frozen=True)
class Pair:
    id: str
    kind: PairKind
    chosen: PairSide
    rejected: PairSide
    source_kind: SourceKind
    source_id: str
    source_trace_ids: tuple[str, ...]
    is_tool_call: bool = False
    tool_name: str | None = None
    evidence_quote: str | None = None
    rationale: str | None = None
    slices: dict[str, str | None] = field(default_factory=dict)  # tool, domain, agent
    generated: bool = False  # one side is a model-written alternative, not a human vote

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind,
            "chosen": self.chosen.to_dict(), "rejected": self.rejected.to_dict(),
            "source_kind": self.source_kind, "source_id": self.source_id,
            "source_trace_ids": list(self.source_trace_ids),
            "is_tool_call": self.is_tool_call, "tool_name": self.tool_name,
            "evidence_quote": self.evidence_quote, "rationale": self.rationale,
            "slices": dict(self.slices), "generated": self.generated,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Pair:
        return cls(
            id=data["id"], kind=data["kind"],
            chosen=PairSide.from_dict(data["chosen"]),
            rejected=PairSide.from_dict(data["rejected"]), source_kind=data["source_kind"],
            source_id=data["source_id"], source_trace_ids=tuple(data["source_trace_ids"]),
            is_tool_call=bool(data.get("is_tool_call")), tool_name=data.get("tool_name"),
            evidence_quote=data.get("evidence_quote"), rationale=data.get("rationale"),
            slices=dict(data.get("slices") or {}), generated=bool(data.get("generated")),
        )


def pair_id(source_kind: str, source_id: str, chosen: str, rejected: str) -> str:
    """Stable: the same feedback always yields the same pair id."""
    return str(uuid.uuid5(STASH_NAMESPACE, f"pair|{source_kind}|{source_id}|{chosen}|{rejected}"))


def pair_context(pair: Pair) -> tuple[Message, ...]:
    """The messages both sides share: everything before the compared actions (or traces).

    When both sides end in the same assistant message up to the compared tool call (the second call
    of a message against an alternative), the shared part of that message is context too.
    """
    chosen, rejected = pair.chosen.trace.messages, pair.rejected.trace.messages
    shared: list[Message] = []
    for a, b in zip(chosen, rejected):
        if a == b:
            shared.append(a)
            continue
        if a.role == b.role == "assistant" and a.content == b.content:
            calls = _common_prefix(a.tool_calls, b.tool_calls)
            if a.content.strip() or calls:
                shared.append(replace(a, tool_calls=calls))
        break
    if shared and tuple(shared) in (chosen, rejected):
        # One side is a prefix of the other (two actions of one trace): the context stops before
        # the earlier side's last action, as action_context does.
        last = shared.pop()
        if last.tool_calls and (last.content.strip() or len(last.tool_calls) > 1):
            shared.append(replace(last, tool_calls=last.tool_calls[:-1]))
    return tuple(shared)


def _common_prefix(a: tuple[ToolCall, ...], b: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]
