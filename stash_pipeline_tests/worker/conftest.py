"""Worker test fixtures: real tau2-bench traces and synthetic pairs (the tiny base model is the
top-level conftest's)."""

from __future__ import annotations

import pytest

from stash_pipeline.core.pairs import Pair, PairSide
from stash_pipeline.core.traces import Message, ToolCall, Trace, action_messages
from stash_pipeline_tests.support.tiny_models import tau2_traces


@pytest.fixture(scope="session")
def tau2_sample() -> list[Trace]:
    """A few real airline simulations, with tools, policy and evaluation context."""
    return tau2_traces(limit=4)


CITIES = ["Paris", "Berlin", "Tokyo", "Lima", "Oslo", "Cairo", "Quito", "Dakar", "Hanoi", "Perth",
          "Seoul", "Rome", "Delhi", "Dublin", "Madrid", "Vienna", "Prague", "Athens", "Sofia",
          "Riga"]


def synthetic_trace(i: int) -> Trace:
    """A good action (look the flight up) and a bad one (refuse) in one trace."""
    city = CITIES[i % len(CITIES)]
    return Trace(id=f"s{i}", messages=(
        Message("user", f"Please book flight {i} to {city} for me."),
        Message("assistant", "",
                tool_calls=(ToolCall(f"c{i}", "search_direct_flight", {"destination": city}),)),
        Message("tool", f'{{"flight": "HAT{i:03d}", "seats": {i % 7 + 1}}}', tool_call_id=f"c{i}"),
        Message("assistant", "I cannot help with that, goodbye."),
    ))


def build_synthetic_pairs(start: int, count: int) -> list[Pair]:
    """Half step-rating pairs (one trace, shared prefix), half generated-alternative pairs."""
    pairs = []
    for i in range(start, start + count):
        trace = synthetic_trace(i)
        good, bad = trace.action(f"s{i}/m1.call0"), trace.action(f"s{i}/m3")
        chosen = PairSide(trace.with_messages(action_messages(trace, good)), good.id)
        if i % 2:
            rejected = PairSide(trace.with_messages(action_messages(trace, bad)), bad.id)
        else:
            refusal = Message("assistant", "I cannot help with that, goodbye.")
            rejected = PairSide(trace.with_messages(trace.messages[:1] + (refusal,)), good.id)
        pairs.append(Pair(id=f"p{i}", kind="action", chosen=chosen, rejected=rejected,
                          source_kind="step_rating", source_id=f"r{i}",
                          source_trace_ids=(trace.id,), is_tool_call=True,
                          tool_name="search_direct_flight"))
    return pairs


@pytest.fixture(scope="session")
def synthetic_pairs():
    """build_synthetic_pairs(start, count): a learnable preference, half shared-prefix pairs."""
    return build_synthetic_pairs
