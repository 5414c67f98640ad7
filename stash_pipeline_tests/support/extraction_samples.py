"""A travel trace with a comment on one of its tool calls, and `run`: the extraction of pairs from
that comment (the extraction suite's sample)."""

from __future__ import annotations

from stash_pipeline.core.feedback import Comment
from stash_pipeline.core.traces import Message, ToolCall, Trace
from stash_pipeline.extraction import extract_feedback_pairs

TRACE = Trace(
    id="t1", agent="travel-bot", domain="airline",
    messages=(
        Message("system", "You are a travel agent."),
        Message("user", "Book me a flight to Paris."),
        Message("assistant", "Let me look.", tool_calls=(
            ToolCall("c0", "search_flights", {"to": "PAR"}),
            ToolCall("c1", "book_flight", {"flight": "AF123"}),
        )),
        Message("tool", "[AF123]", tool_call_id="c0", name="search_flights"),
        Message("tool", "booked AF123, aisle seat", tool_call_id="c1", name="book_flight"),
        Message("assistant", "AF123 is booked."),
        Message("user", "No, I wanted a window seat. You should have asked first."),
        Message("assistant", "Sorry, I will change it."),
    ),
)


COMMENT = Comment("k1", "t1", "Booking without asking which seat I wanted was wrong.",
                  action_id="t1/m2.call1")


def run(config, comments=(COMMENT,), audience="personal"):
    return extract_feedback_pairs([TRACE], list(comments), audience, config)
