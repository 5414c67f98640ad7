"""Which traces share a task (docs/trust.md, Groups): the trust report's intervals are clustered
by it and its within-task figures compare traces of one task. Pure.

The rule, first that applies: the metadata field the user names (``group_by``; a trace without
it stands alone); else ``metadata.task_id``; else ``metadata.evaluation_context`` (the task and
tool context known before the actions); else the first user message (as the trace list shows it,
its first 256 characters); else the trace stands alone.
"""

from __future__ import annotations

import json
from typing import Any

DEFAULT_GROUPING = "task_id, else evaluation_context, else the first user message"


def _text(value: Any) -> str | None:
    if value is None or value == "" or value == {}:
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True,
                                                            separators=(",", ":"))


def task_group(trace: Any, group_by: str | None = None) -> str | None:
    """The group of a trace with ``task_id``, ``metadata`` and ``preview`` (a stored trace's
    row); None: it stands alone."""
    metadata = trace.metadata or {}
    if group_by:
        value = _text(metadata.get(group_by))
        return None if value is None else f"{group_by}:{value}"
    for name, value in (("task_id", trace.task_id or metadata.get("task_id")),
                        ("evaluation_context", metadata.get("evaluation_context")),
                        ("first_user_message", trace.preview)):
        text = _text(value)
        if text is not None:
            return f"{name}:{text}"
    return None
