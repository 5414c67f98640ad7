"""A record's identity and content digest depend on its content only, never on its place in a file.

For every format, the same records imported again in reverse order, split into two files (shards),
or with records repeated are all ``unchanged``: no version moves, no score is dropped, no feedback
is orphaned. Real data where the project has it (hh-rlhf, AgentProcessBench, tau2-bench),
hand-written records elsewhere; on both databases.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

from stash_pipeline.importers import read_path
from stash_pipeline.store import ActionScore, Store
from stash_pipeline_tests.support.importer_helpers import (
    refund_trace,
    shared_data,
    write_json,
    write_jsonl,
)
from stash_pipeline_tests.support.otel_samples import (
    ANSWER,
    CALL,
    QUESTION,
    RESULT,
    SYSTEM,
    export,
    span,
)


def jsonl_lines(path: Path, count: int) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in islice(handle, count)]


def preference_items() -> list[Any]:
    return jsonl_lines(shared_data("hh-rlhf", "harmless-base-dev.jsonl.gz"), 12)


def agentprocessbench_items() -> list[Any]:
    return jsonl_lines(shared_data("agentprocessbench", "hotpotqa.jsonl"), 6)


def openai_items() -> list[Any]:
    """Trace objects without ids (ids from content), with feedback."""
    return [{"agent": "support", "metadata": {"task_id": f"t{i % 2}"},
             "messages": [{"role": "user", "content": f"Refund order {i}"},
                          {"role": "assistant", "content": f"Refunded {i}."}],
             "feedback": [{"type": "rating", "value": i % 3 - 1, "action_id": "m1"},
                          {"type": "comment", "text": f"note {i}"}]}
            for i in range(5)]


def anthropic_items() -> list[Any]:
    items = []
    for i in range(4):
        item = refund_trace(feedback=[{"type": "rating", "value": 1, "message_index": 1}])
        del item["id"]
        item["messages"][0] = {"role": "user", "content": f"Refund order {40 + i}"}
        items.append(item)
    return items


TAU2_RUN = ("tau2-bench", "runs", "airline_gpt-4.1.json")


def tau2_items() -> list[Any]:
    run = json.loads(shared_data(*TAU2_RUN).read_text(encoding="utf-8"))
    return run["simulations"][:6]


def write_tau2(folder: Path, name: str, simulations: list[Any]) -> Path:
    run = json.loads(shared_data(*TAU2_RUN).read_text(encoding="utf-8"))
    return write_json(folder, name, {**run, "simulations": simulations})


def otel_conversations() -> list[list[dict[str, Any]]]:
    """The spans of three conversations, and of one whose two spans start and end at the same
    time (a tie that file order must not break)."""
    conversations = []
    for n in range(3):
        conversations.append([
            span(f"{n}c1", 200, 300, trace=f"{n}" * 32, conversation=f"conv-{n}",
                 inputs=[QUESTION], outputs=[CALL], system=SYSTEM),
            span(f"{n}c2", 400, 800, trace=f"{n}" * 32, conversation=f"conv-{n}",
                 inputs=[QUESTION, CALL, RESULT], outputs=[ANSWER], system=SYSTEM)])
    other = {"role": "assistant", "parts": [{"type": "text", "content": "Also sunny."}]}
    conversations.append([
        span("tie-b", 500, 600, trace="9" * 32, conversation="tie", inputs=[QUESTION],
             outputs=[other]),
        span("tie-a", 500, 600, trace="9" * 32, conversation="tie", inputs=[QUESTION],
             outputs=[ANSWER])])
    return conversations


def otel_items() -> list[Any]:
    """One OTLP export per conversation (its record: a conversation is built from its spans)."""
    return [export(*spans) for spans in otel_conversations()]


def jsonl(folder: Path, name: str, items: list[Any]) -> Path:
    return write_jsonl(folder, f"{name}.jsonl", items)


FORMATS: dict[str, tuple[Callable[[], list[Any]], Callable[[Path, str, list[Any]], Path]]] = {
    "preference": (preference_items, jsonl),
    "openai": (openai_items, jsonl),
    "anthropic": (anthropic_items, jsonl),
    "agentprocessbench": (agentprocessbench_items, jsonl),
    "tau2": (tau2_items, write_tau2),
    "otel": (otel_items, jsonl),
}


def variants(items: list[Any]) -> dict[str, list[list[Any]]]:
    """Each variant: the files (lists of items) imported one after the other."""
    half = len(items) // 2
    return {
        "reversed": [items[::-1]],
        "shuffled": [items[1::2] + items[0::2]],
        "shards": [items[half:], items[:half]],
        "repeated": [[items[1], *items, items[0], items[1]]],
        "one at a time, last first": [[item] for item in reversed(items)],
    }


def stored(store: Store) -> dict[str, tuple[int, object]]:
    return {t.id: (t.version, t.updated_at) for t in store.list_traces()}


@pytest.mark.parametrize("name", FORMATS)
def test_the_same_records_in_any_order_shard_or_repetition_are_unchanged(
        name: str, store: Store, tmp_path: Path) -> None:
    make, write = FORMATS[name]
    items = make()
    first = store.import_traces(read_path(write(tmp_path, "all", items), format=name))
    assert first.imported == first.traces > 1 and first.updated == 0
    before = stored(store)
    feedback = store.feedback_for(sorted(before))
    # A score on every trace: an update would drop it.
    for trace_id in before:
        trace = store.get_trace(trace_id)
        store.save_action_scores("v1", {trace_id: trace.version}, [
            ActionScore(a.id, trace_id, trace.version, "v1", 0.5) for a in trace.actions()])
    for variant, files in variants(items).items():
        for index, part in enumerate(files):
            path = write(tmp_path, f"{variant.replace(' ', '-')}-{index}", part)
            summary = store.import_traces(read_path(path, format=name))
            assert (summary.imported, summary.updated) == (0, 0), (variant, index, summary)
            assert summary.unchanged == summary.traces > 0, (variant, index, summary)
    assert stored(store) == before
    assert all(store.scored_version(trace_id, "v1") == 1 for trace_id in before)
    assert store.orphaned_feedback() == []
    assert store.feedback_for(sorted(before)) == feedback


def test_otel_spans_of_one_conversation_in_any_order_make_one_trace(store: Store,
                                                                  tmp_path: Path) -> None:
    """Spans that tie on start and end time are ordered by span id, not by file position."""
    spans = [s for conversation in otel_conversations() for s in conversation]
    first = store.import_traces(read_path(jsonl(tmp_path, "spans", [export(*spans)])))
    again = store.import_traces(read_path(jsonl(tmp_path, "reversed",
                                                [export(*s) for s in [spans[::-1]]])))
    apart = store.import_traces(read_path(jsonl(tmp_path, "apart",
                                                [export(s) for s in spans[::-1]])))
    assert first.imported == 4
    assert (again.unchanged, again.updated, apart.unchanged, apart.updated) == (4, 0, 4, 0)
