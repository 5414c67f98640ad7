"""Small hand-made traces for pair tests."""

from __future__ import annotations

from stash_pipeline.core.pairs import Pair, PairSide
from stash_pipeline.core.traces import Message, ToolCall, Trace


def tool_trace(trace_id: str = "t1", **fields) -> Trace:
    """system, user, assistant text + two calls, tool, tool, assistant answer, user, assistant."""
    return Trace(
        id=trace_id,
        messages=(
            Message("system", "You are a travel agent."),
            Message("user", "Book me a flight to Paris."),
            Message("assistant", "Let me look.", tool_calls=(
                ToolCall("c0", "search_flights", {"to": "PAR"}),
                ToolCall("c1", "get_user", {"id": "u1"}),
            )),
            Message("tool", "[AF123]", tool_call_id="c0", name="search_flights"),
            Message("tool", "{\"name\": \"Ann\"}", tool_call_id="c1", name="get_user"),
            Message("assistant", "AF123 is booked."),
            Message("user", "No, I asked for a window seat first."),
            Message("assistant", "Sorry, which seat do you want?"),
        ),
        **fields,
    )


def text_trace(trace_id: str, **fields) -> Trace:
    return Trace(id=trace_id, messages=(
        Message("user", f"question {trace_id}"), Message("assistant", f"answer {trace_id}"),
    ), **fields)


def make_pair(index: int, chosen: str, rejected: str | None = None, *, tool: bool = False) -> Pair:
    rejected = rejected or chosen
    return Pair(
        id=f"p{index:05d}", kind="action" if rejected == chosen else "trace",
        chosen=PairSide(qa_trace(chosen)), rejected=PairSide(qa_trace(rejected)),
        source_kind="step_rating", source_id=f"s{index}",
        source_trace_ids=tuple(sorted({chosen, rejected})), is_tool_call=tool,
    )


def qa_trace(trace_id: str) -> Trace:
    return Trace(trace_id, (Message("user", "q"), Message("assistant", "a")))
