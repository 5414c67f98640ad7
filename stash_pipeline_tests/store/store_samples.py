"""Hand-made traces for the store suite: tool calls, unicode, key order, empty assistant turns."""

from __future__ import annotations

from stash_pipeline.core.feedback import (
    Comment,
    Rating,
    ReviewedComparison,
    VerifiedOutcome,
    feedback_id,
)
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.traces import Message, ToolCall, Trace


def make_trace(trace_id: str, *, owner: str = "local", turns: int = 2, text: str = "",
               contribute: bool = False) -> Trace:
    messages = [Message("system", "Follow the refund policy."),
                Message("user", f"Héllo ✈️ {text}".strip())]
    for turn in range(turns):
        call_id = f"call-{turn}"
        messages += [
            # Key order is deliberate (z before a): the renderer sees arguments as stored.
            Message("assistant", "" if turn % 2 else f"Looking up {turn}…", tool_calls=(
                ToolCall(call_id, "get_reservation", {"zeta": turn, "alpha": [1, {"b": None}]}),
                ToolCall(f"{call_id}b", "get_user", {"user_id": "u\u00e9"}),
            )),
            Message("tool", '{"ok": true}', tool_call_id=call_id, name="get_reservation"),
            Message("tool", "not found", tool_call_id=f"{call_id}b", name="get_user", error=True),
        ]
    messages.append(Message("assistant", "Done. " + "x" * 5000))
    return Trace(id=trace_id, messages=tuple(messages), owner=owner, agent="gpt-4.1",
                 domain="airline",
                 metadata={"task_id": "7", "evaluation_context": {"policy": "p", "tools": []}},
                 tools=({"type": "function", "function": {"name": "get_reservation"}},),
                 contribute=contribute)


def make_record(trace: Trace, source: str = "sample.jsonl:1", feedback=()) -> ImportedTrace:
    return ImportedTrace(trace=trace, feedback=tuple(feedback), source=source)


def feedback_on(trace: Trace) -> list:
    first_call = next(a for a in trace.actions() if a.is_tool_call)
    return [
        Comment(feedback_id("comment", trace.id, "c1"), trace.id, "Should ask first.",
                action_id=first_call.id, author="ana"),
        Rating(feedback_id("rating", trace.id, first_call.id), trace.id, 1.0,
               action_id=first_call.id),
        Rating(feedback_id("rating", trace.id), trace.id, -1.0),
        VerifiedOutcome(feedback_id("outcome", trace.id), trace.id, 1.0, source="tau2"),
    ]


def comparison(chosen: Trace, rejected: Trace) -> ReviewedComparison:
    return ReviewedComparison(feedback_id("comparison", chosen.id, rejected.id), chosen.id,
                              rejected.id, reviewer="bo", status="approved", rationale="why")


def preview_report(store, monkeypatch, capsys, *trace_ids: str) -> dict:
    """`stash-pipeline pairs preview --json` on this store: the pair report a person sees."""
    import json

    from stash_pipeline.cli import main

    monkeypatch.setenv("DATABASE_URL", store.url)
    selection = ["--trace-ids", *trace_ids] if trace_ids else ["--all-traces"]
    capsys.readouterr()
    assert main(["pairs", "preview", *selection, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])
