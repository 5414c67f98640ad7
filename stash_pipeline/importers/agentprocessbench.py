"""AgentProcessBench JSONL: OpenAI chat traces with human step labels and a final label.

``step_labels`` ({message index: +1/0/-1}) become a step rating on each action of that assistant
message, ``final_label`` a trace rating, ``query_index`` the task id (samples of one question share
it), ``tools`` the trace's tools. The dataset gives no trace id: it is derived from the record's
``data_source`` and ``total_index``, so reimporting updates the same traces.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import Feedback, Rating, feedback_id
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.traces import Trace, content_trace_id
from stash_pipeline.core.validation import MAX_JSON_DEPTH
from stash_pipeline.importers.common import (
    ImportOptions,
    finish,
    locating,
    openai_tools,
    step_ratings,
    trace_object,
)
from stash_pipeline.importers.fields import expect_object, number, optional_str
from stash_pipeline.importers.jsonio import iter_records, loads_text
from stash_pipeline.importers.openai_chat import convert_messages

FORMAT = "agentprocessbench"
IDENTITY_KEYS = ("data_source", "total_index")


def read(path: Path, options: ImportOptions) -> Iterator[ImportedTrace]:
    file = str(path)
    for record in iter_records(path, options.limits):
        with locating(file, record.label):
            trace, feedback = convert_record(trace_object(record), options)
        yield finish(trace, feedback, file=file, record=record.label, number=record.number,
                     limits=options.limits, outcome_field=options.outcome_field)


def convert_record(record: dict[str, Any],
                   options: ImportOptions) -> tuple[Trace, tuple[Feedback, ...]]:
    identity = {k: record.get(k) for k in IDENTITY_KEYS} if record.get("total_index") is not None \
        else {k: v for k, v in record.items() if k not in ("step_labels", "final_label")}
    metadata: dict[str, Any] = {}
    task_id = optional_str(record, "query_index", "query_index")
    if task_id is not None:
        metadata["task_id"] = task_id
    if record.get("sample_index") is not None:
        metadata["sample_index"] = record["sample_index"]
    trace = Trace(
        id=content_trace_id(FORMAT, identity),
        # The recorded agent sometimes emitted broken arguments, and the labels judge exactly that.
        messages=convert_messages(record["messages"], keep_unparsed_arguments=True),
        owner=options.owner,
        domain=optional_str(record, "data_source", "data_source"),
        metadata=metadata,
        tools=openai_tools(_python_or_json(record.get("tools"), "tools"), "tools"),
        contribute=options.contribute,
    )
    return trace, _labels(record, trace)


def _labels(record: dict[str, Any], trace: Trace) -> tuple[Feedback, ...]:
    feedback: list[Feedback] = []
    labels = record.get("step_labels")
    for key, label in (expect_object(labels, "step_labels") if labels is not None else {}).items():
        field = f"step_labels.{key}"
        try:
            index = int(key)
        except ValueError:
            raise InputError(f"a step label's key is a message index, got {key!r}",
                             field=field) from None
        feedback.extend(step_ratings(trace, index, number(label, field), field=field,
                                     origin="step_labels"))
    if record.get("final_label") is not None:
        value = number(record["final_label"], "final_label")
        feedback.append(Rating(feedback_id("rating", trace.id, "final_label"), trace.id, value))
    return tuple(feedback)


def _python_or_json(value: Any, field: str) -> Any:
    """The dataset stores ``tools`` as a Python literal string (single quotes); accept that too."""
    if not isinstance(value, str):
        return value
    try:
        return loads_text(value, field, MAX_JSON_DEPTH)
    except ValueError:
        pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise InputError("expected a list of tool schemas (JSON, or a Python literal string)",
                         field=field) from None
