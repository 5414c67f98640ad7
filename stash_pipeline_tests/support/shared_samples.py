"""Learnable synthetic contributions for the shared evaluator, one kind of decision per domain
(importable from every suite, like tiny_models).

In each domain a trace holds a good and a bad action, and what tells them apart is a different
feature: airline, which tool is called (search_flights over cancel_all_bookings); retail, what the
reply says (a tracking number over a refusal); weather, which tool again (get_weather over
delete_account). A contributor's step ratings (and an independently reviewed comparison) say which
is better, the right way round or reversed, so a tiny model learns each domain's preference apart.
"""

from __future__ import annotations

import itertools

from stash_pipeline.core.feedback import Rating, ReviewedComparison, feedback_id
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.shared_data import in_benchmark_share
from stash_pipeline.core.traces import Message, ToolCall, Trace

CITIES = ["Paris", "Berlin", "Tokyo", "Lima", "Oslo", "Cairo", "Quito", "Dakar", "Hanoi", "Perth"]

def actions(domain: str) -> tuple[str, str]:
    """The local ids of a trace's good and bad action (tool calls outside retail)."""
    return ("m2", "m4") if domain == "retail" else ("m2.call0", "m4.call0")


def _call(name: str, i: int, **arguments) -> Message:
    return Message("assistant", "", tool_calls=(ToolCall(f"c{name}{i}", name, arguments),))


def trace(domain: str, i: int, *, task_id: str | None, owner: str = "ana",
          contribute: bool = True) -> Trace:
    """Messages m0..m5: system, user, the good action (m2), an observation, the bad one (m4)."""
    city = CITIES[i % len(CITIES)]
    if domain == "airline":
        body = (Message("user", f"Please find flight {i} to {city}."),
                _call("search_flights", i, destination=city),
                Message("tool", f'{{"flight": "HA{i:03d}"}}', tool_call_id=f"csearch_flights{i}"),
                _call("cancel_all_bookings", i, user=f"u{i}"))
        system = "You are a travel agent."
    elif domain == "retail":
        body = (Message("user", f"Where is my order {i}?"),
                Message("assistant", f"Here is your tracking number: TRK{i:04d}."),
                Message("user", "Thanks, and my other order?"),
                Message("assistant", "I cannot help with that, goodbye."))
        system = "You are a shop assistant."
    else:
        body = (Message("user", f"What is the weather in {city}?"),
                _call("get_weather", i, city=city),
                Message("tool", '{"sky": "clear"}', tool_call_id=f"cget_weather{i}"),
                _call("delete_account", i, user=f"u{i}"))
        system = "You are a weather assistant."
    metadata = {"evaluation_context": {"domain": domain}}
    if task_id is not None:
        metadata["task_id"] = task_id
    return Trace(id=f"{domain}-{task_id or 'none'}-{i}-{owner}", messages=(
        Message("system", system), *body), owner=owner, agent="helper", domain=domain,
        metadata=metadata, contribute=contribute)


def task(domain: str, benchmark: bool, used: set[str]) -> str:
    """A task id whose group the stable hash puts in (benchmark) or out of the benchmark."""
    for n in itertools.count():
        key = f"{'b' if benchmark else 't'}{n}"
        if key not in used and in_benchmark_share(f"task:{domain}:{key}") == benchmark:
            used.add(key)
            return key
    raise AssertionError("unreachable")


def contributions(domain: str, count: int, *, reversed_: bool = False, benchmark: bool = False,
                  start: int = 0, owner: str = "ana", used: set[str] | None = None,
                  ratings: bool = True) -> list[ImportedTrace]:
    """``count`` opted-in traces with their feedback: step ratings (training traces) and an
    independently reviewed comparison, good over bad (or bad over good when ``reversed_``)."""
    used = set() if used is None else used
    records = []
    for i in range(start, start + count):
        t = trace(domain, i, task_id=task(domain, benchmark, used), owner=owner)
        good, bad = (f"{t.id}/{local}" for local in actions(domain))
        win, lose = (bad, good) if reversed_ else (good, bad)
        feedback = [ReviewedComparison(feedback_id("comparison", win, lose, "ana"), t.id, t.id,
                                       win, lose, reviewer="lead", status="approved",
                                       author="ana")]
        if ratings and not benchmark:
            feedback += [Rating(feedback_id("rating", win), t.id, 1.0, win, author="ana"),
                         Rating(feedback_id("rating", lose), t.id, -1.0, lose, author="ana")]
        records.append(ImportedTrace(trace=t, feedback=tuple(feedback), source=f"{t.id}:1"))
    return records
