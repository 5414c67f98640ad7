"""stash_pipeline/samples/shared/contributions.jsonl: the shared evaluator's demo data (the main
job releases a first shared evaluator on it). It is shared_samples' learnable contributions in the
import format; this test keeps the file and the generator in step, and imports it.

Regenerate:
    STASH_REGENERATE_SAMPLES=1 pytest stash_pipeline_tests/importers/test_shared_demo_samples.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from stash_pipeline.core.feedback import Rating, ReviewedComparison
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.importers import read_path
from stash_pipeline_tests.support.shared_samples import contributions

SAMPLE = Path(__file__).resolve().parents[2] / "stash_pipeline" / "samples" / "shared" / \
    "contributions.jsonl"
OWNER = "ana"


def demo_records() -> list[ImportedTrace]:
    """Training traces in three domains (step ratings and a reviewed comparison each) and
    benchmark traces (a reviewed comparison each), as the first release of the shared test."""
    used: set[str] = set()
    return [*contributions("airline", 15, used=used), *contributions("retail", 15, used=used),
            *contributions("weather", 5, used=used),
            *contributions("retail", 16, benchmark=True, start=100, used=used),
            *contributions("weather", 3, benchmark=True, start=100, used=used)]


def trace_object(record: ImportedTrace) -> dict:
    trace = record.trace
    local = {a.id: a.local_id for a in trace.actions()}
    messages = []
    for message in trace.messages:
        data: dict = {"role": message.role, "content": message.content}
        if message.tool_calls:
            data["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.name, "arguments": json.dumps(c.arguments)}} for c in message.tool_calls]
        if message.tool_call_id:
            data["tool_call_id"] = message.tool_call_id
        messages.append(data)
    feedback = []
    for item in record.feedback:
        if isinstance(item, Rating):
            feedback.append({"type": "rating", "value": item.value,
                             "action_id": local[item.action_id], "author": item.author})
        else:
            assert isinstance(item, ReviewedComparison)
            feedback.append({"type": "comparison", "chosen": local[item.chosen_action_id],
                             "rejected": local[item.rejected_action_id], "author": item.author,
                             "reviewer": item.reviewer, "status": item.status})
    return {"id": trace.id, "agent": trace.agent, "domain": trace.domain,
            "metadata": trace.metadata, "messages": messages, "feedback": feedback}


def test_the_demo_file_is_the_generators_output_and_imports_as_it():
    expected = "".join(json.dumps(trace_object(r), sort_keys=True) + "\n"
                       for r in demo_records())
    if os.environ.get("STASH_REGENERATE_SAMPLES"):
        SAMPLE.write_text(expected)
    assert SAMPLE.read_text() == expected, __doc__
    imported = list(read_path(SAMPLE, owner=OWNER, contribute=True))
    generated = demo_records()
    assert [r.trace.messages for r in imported] == [r.trace.messages for r in generated]
    assert all(r.trace.contribute for r in imported)
    for got, want in zip(imported, generated):
        assert ({(type(f).__name__, getattr(f, "action_id", None)) for f in got.feedback}
                == {(type(f).__name__, getattr(f, "action_id", None)) for f in want.feedback})
        [comparison] = [f for f in got.feedback if isinstance(f, ReviewedComparison)]
        [wanted] = [f for f in want.feedback if isinstance(f, ReviewedComparison)]
        assert (comparison.chosen_action_id, comparison.rejected_action_id, comparison.reviewer,
                comparison.status, comparison.author) == (
            wanted.chosen_action_id, wanted.rejected_action_id, "lead", "approved", "ana")
