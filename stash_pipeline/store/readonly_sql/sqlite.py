"""Caller SQL on SQLite: run over a database that holds only the caller's rows.

Each query runs in a child process (``sqlite_child.py``, stdlib only) that copies the caller's rows
of the five views, by the endpoint's own selects, from the store file (attached read-only) into a
private temporary database, detaches the store and only then compiles the caller's query. No
expression of the caller is ever evaluated on another account's row, so neither an error ("integer
overflow" on some rows only), nor a value, nor the query's time can tell anything about them.

An authorizer (``sqlite3.Connection.set_authorizer``) allows only SELECT, recursive CTEs, the
functions in ``functions.SQLITE_FUNCTIONS`` and reads of the five tables, CTEs and subqueries:
no ``ATTACH`` (the limit of attached databases is also 0), ``PRAGMA``, ``sqlite_master`` or
writes. A progress handler interrupts the query at the timeout, and the parent kills the process
if it is still running a moment later: a single long function call (LIKE, GLOB, instr of long
strings), which the progress handler cannot interrupt, ends at the timeout too. The process runs at
a lower CPU priority (``nice``) and with a memory limit, so a slow query does not slow the API.
"""

from __future__ import annotations

import logging
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from stash_pipeline.store.readonly_sql.errors import SqlRefused, SqlUnavailable, timed_out
from stash_pipeline.store.readonly_sql.functions import SQLITE_FUNCTIONS
from stash_pipeline.store.readonly_sql.views import VIEW_NAMES, compile_select, view_selects

CHILD = Path(__file__).with_name("sqlite_child.py")
KILL_GRACE_S = 0.5  # after the timeout, before the process is killed
MEMORY_BYTES = 2 * 1024**3  # address space of the query process
HEAP_BYTES = 512 * 1024**2  # SQLite's own allocations (PRAGMA hard_heap_limit)
NICE = 10

log = logging.getLogger(__name__)


def run(engine: sa.Engine, owner: str, sql: str, *, max_rows: int,
        timeout_s: float) -> tuple[list[str], list[tuple[Any, ...]]]:
    path = engine.url.database
    if not path or path == ":memory:":
        raise SqlUnavailable("the SQL endpoint needs a database file, not an in-memory database")
    source = sa.MetaData()
    selects = view_selects(sa.literal(owner), lambda t: t.to_metadata(source, schema="src"))
    job = {
        "source": Path(path).resolve().as_uri() + "?mode=ro", "sql": sql, "max_rows": max_rows,
        "timeout_s": timeout_s, "views": {name: compile_select(select, engine.dialect)
                                          for name, select in selects.items()},
        "functions": sorted(SQLITE_FUNCTIONS), "nice": NICE, "memory_bytes": MEMORY_BYTES,
        "heap_bytes": HEAP_BYTES,
    }
    answer = _in_child(job, timeout_s)
    if "error" in answer:
        if answer["code"] == "timeout":
            raise timed_out(timeout_s)
        raise SqlRefused(answer["error"], code=answer["code"])
    return answer["columns"], answer["rows"]


def _in_child(job: dict, timeout_s: float) -> dict:
    process = subprocess.Popen([sys.executable, "-I", "-S", str(CHILD)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = process.communicate(pickle.dumps(job), timeout=timeout_s + KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise timed_out(timeout_s) from None
    finally:
        if process.poll() is None:  # an exception of ours: never leave the child running
            process.kill()
            process.wait()
    if process.returncode != 0 or not out:
        log.warning("SQL query process failed (%s): %s", process.returncode, err[-2000:])
        raise SqlUnavailable(f"the query process ended without an answer (exit status "
                             f"{process.returncode}); try again, and tell the operator if it "
                             "persists")
    return pickle.loads(out)


__all__ = ["VIEW_NAMES", "run"]
