"""Hand-made traces for the store suite: tool calls, unicode, key order, empty assistant turns."""

from __future__ import annotations

import threading
from collections.abc import Callable

from stash_pipeline.core.feedback import (
    Comment,
    Rating,
    ReviewedComparison,
    VerifiedOutcome,
    feedback_id,
)
from stash_pipeline.core.pair_builders import build_feedback_pairs
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.requests import parse_reward_model_request
from stash_pipeline.core.traces import Message, ToolCall, Trace
from stash_pipeline.store import ActionScore, Store, TraceScore


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


# The trust report's sample (test_store_trust, the CLI's rm trust) -------------------------------

TRACES = ("a", "b", "c", "d", "e", "f")
SUCCEEDED = {"a": True, "b": True, "c": True, "d": False, "e": False}  # f has no outcome
RAW = {"a": 3.0, "b": 2.0, "c": -1.0, "d": 0.0, "e": -2.0, "f": 9.0}


def outcome(trace_id: str) -> VerifiedOutcome:
    return VerifiedOutcome(feedback_id("outcome", trace_id), trace_id,
                           1.0 if SUCCEEDED[trace_id] else 0.0, source="tau2")


def trust_sample(store) -> str:
    """ana's six traces with outcomes and ratings, bob's one, and ana's model trained on a and
    b (a trace-rating pair of a over b), which scored all of ana's traces."""
    store.import_traces([make_record(make_trace(t, owner="ana", text=t),
                                     feedback=[outcome(t)] if t in SUCCEEDED else [])
                         for t in TRACES])
    store.import_traces([make_record(make_trace("bob-1", owner="bob"),
                                     feedback=[VerifiedOutcome("o-bob", "bob-1", 1.0)])])
    traces = {t.id: t for t in store.get_traces(list(TRACES))}
    first_call = next(x for x in traces["c"].actions() if x.is_tool_call)
    ratings = [Rating("r-a", "a", 2.0), Rating("r-b", "b", 1.0),
               *[Rating(f"r-{t}", t, value) for t, value in (("c", 1.0), ("d", 3.0),
                                                             ("e", 2.0))],
               Rating("r-step", "c", 1.0, action_id=first_call.id)]
    store.add_feedback(ratings, owner="ana")
    model = store.create_reward_model("ana", parse_reward_model_request(
        {"name": "m", "trace_ids": ["a", "b"]}))
    pairs = build_feedback_pairs([traces["a"], traces["b"]], ratings[:2])
    store.save_pairs(pairs, reward_model_id=model.id)
    store.save_split({p.id: "train" for p in pairs}, reward_model_id=model.id)
    store.mark_running(model.id)
    store.mark_succeeded(
        model.id, checkpoint_uri="file:///x", scored={t: 1 for t in TRACES},
        metrics={"eval_pairs": 3, "eval_accuracy": 1.0, "max_length": 1024, "num_pairs": 5,
                 "truncated_pairs": 1},
        scores=[TraceScore(t, 1, model.id, RAW[t], 0.5, input_tokens=300 * (i + 1))
                for i, t in enumerate(TRACES)],
        action_scores=[ActionScore(x.id, t, 1, model.id, 0.1, 0.2 if t != "d" else -0.4,
                                   input_tokens=900) for t in TRACES
                       for x in traces[t].actions()])
    return model.id


def run_together(workers: list[Callable[[], None]]) -> list[BaseException]:
    """Start every worker at once (behind a barrier); return what they raised."""
    barrier = threading.Barrier(len(workers))
    errors: list[BaseException] = []

    def run(work: Callable[[], None]) -> None:
        barrier.wait()
        try:
            work()
        except BaseException as error:  # noqa: BLE001 - the test reports every failure
            errors.append(error)

    threads = [threading.Thread(target=run, args=(work,)) for work in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def own_store(url: str) -> Store:
    """A second Store on the same database: its own engine, so its own connections."""
    return Store(url)
