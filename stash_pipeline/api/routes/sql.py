"""``POST /api/v1/sql``: one read-only SELECT over your own rows (docs/api.md, "SQL").

Queries run in worker threads of their own (never the event loop or the pool the other routes run
in); ``ReadonlySql`` runs at most ``STASH_SQL_CONCURRENCY`` at a time, and one that waits longer
than the statement timeout for its turn is answered 503 with ``Retry-After``.
"""

from __future__ import annotations

from functools import partial

import anyio
from fastapi import APIRouter, HTTPException

from stash_pipeline.api.auth import AccountDep
from stash_pipeline.api.bodies import SqlBody
from stash_pipeline.api.deps import SettingsDep, SqlDep, SqlThreadsDep
from stash_pipeline.api.responses import SqlResult
from stash_pipeline.services import sql
from stash_pipeline.store.readonly_sql import SqlBusy

router = APIRouter(prefix="/api/v1", tags=["sql"])


@router.post("/sql", responses={
    422: {"description": "Not one SELECT over the five views, a function that is not allowed, "
                         "a database error, or past the statement timeout (`code`)."},
    503: {"description": "The deployment has not set the SQL endpoint up (PostgreSQL role), or "
                         "every query slot stayed busy (`Retry-After`)."}})
async def run_sql(body: SqlBody, account: AccountDep, settings: SettingsDep, readonly: SqlDep,
                  threads: SqlThreadsDep) -> SqlResult:
    """Tables: `traces`, `scores`, `action_scores`, `reward_models`, each holding only your
    rows. At most `STASH_SQL_MAX_ROWS` rows (`truncated` says when there were more)."""
    try:
        return await anyio.to_thread.run_sync(
            partial(sql.run, readonly, account.id, body.sql, max_rows=settings.sql_max_rows,
                    timeout_s=settings.sql_timeout_s),
            limiter=threads)
    except SqlBusy as error:
        raise HTTPException(503, str(error), headers={
            "Retry-After": str(max(1, round(settings.sql_timeout_s)))}) from None
