"""The SQL endpoint: one read-only SELECT over the caller's own traces, scores, action scores and
reward models, with a row limit and a statement timeout (``store.readonly_sql`` enforces it)."""

from __future__ import annotations

import base64
import math
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.store.readonly_sql import ReadonlySql

MAX_SQL_CHARS = 20_000


def run(sql_engine: ReadonlySql, owner: str, sql: Any, *, max_rows: int,
        timeout_s: float) -> dict[str, Any]:
    if not isinstance(sql, str) or not sql.strip():
        raise InputError("send one SELECT statement as a non-empty string", field="sql")
    if len(sql) > MAX_SQL_CHARS:
        raise InputError(f"a query is at most {MAX_SQL_CHARS} characters", field="sql")
    if "\x00" in sql:
        raise InputError("a query cannot contain NUL characters", field="sql")
    result = sql_engine.run(owner, sql, max_rows=max_rows, timeout_s=timeout_s)
    return {"columns": result.columns,
            "rows": [[json_value(v) for v in row] for row in result.rows],
            "row_count": len(result.rows), "truncated": result.truncated, "max_rows": max_rows}


def json_value(value: Any) -> Any:
    """A database value as JSON: times as ISO 8601, exact numbers as numbers, bytes as base64."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        return json_value(float(value))
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    return str(value)
