"""Content digests (core.digests) are those of their definition: SHA-256 of the payload's compact
JSON. Stored digests decide whether a reimport changed a trace or orphaned an action's feedback,
so a faster computation must give the very same digests."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

from stash_pipeline.core.digests import action_digests, trace_digest
from stash_pipeline.core.serialize import message_to_dict
from stash_pipeline.core.traces import Message, ToolCall, Trace, action_messages
from stash_pipeline.importers import read_path

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def defined_digest(payload: Any) -> str:
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()


def rendered(message: Message) -> dict[str, Any]:
    return {"role": message.role, "content": message.content,
            "tool_calls": [[c.name, c.arguments] for c in message.tool_calls]}


def defined_action_digests(trace: Trace) -> dict[str, str]:
    """docs: each action with every message before it, the last cut right after the action."""
    head = {"tools": list(trace.tools), "evaluation_context": trace.evaluation_context}
    return {action.id: defined_digest({**head, "messages": [
        rendered(m) for m in action_messages(trace, action)]}) for action in trace.actions()}


def sample_traces() -> list[Trace]:
    files = [SHARED_DATA / "agentprocessbench" / "hotpotqa.jsonl",
             *sorted((SHARED_DATA / "tau2-bench" / "runs").iterdir())]
    traces = [r.trace for f in files for r in itertools.islice(read_path(f), 40)]
    calls = tuple(ToolCall(f"c{k}", "lookup", {"z": k, "a": "é\ud800"}) for k in range(3))
    traces.append(Trace("edge", (  # text and three calls in one message, one without text
        Message("user", "go ✈️"), Message("assistant", "first", tool_calls=calls),
        Message("tool", "ok", tool_call_id="c0"), Message("assistant", "", tool_calls=calls[:1]),
        Message("assistant", "done")), metadata={"evaluation_context": {"policy": [1.5, None]}},
        tools=({"type": "function", "function": {"name": "lookup"}},)))
    return traces


def test_action_and_trace_digests_are_those_of_their_definition():
    traces = sample_traces()
    assert sum(len(t.actions()) for t in traces) > 1000  # long tau2 traces among them
    for trace in traces:
        assert action_digests(trace) == defined_action_digests(trace), trace.id
        assert action_digests(trace, trace.actions()) == defined_action_digests(trace)
        assert trace_digest(trace) == defined_digest({
            "agent": trace.agent, "domain": trace.domain, "metadata": trace.metadata,
            "tools": list(trace.tools),
            "messages": [message_to_dict(m) for m in trace.messages]}), trace.id
