"""``POST /api/v1/sql``: one read-only SELECT over your own rows (docs/api.md, "SQL")."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from stash_pipeline.api.auth import current_account
from stash_pipeline.api.bodies import SqlBody
from stash_pipeline.services import sql
from stash_pipeline.store import Account

router = APIRouter(prefix="/api/v1", tags=["sql"])


@router.post("/sql", responses={
    422: {"description": "Not one SELECT over the four views, a function that is not allowed, "
                         "a database error, or past the statement timeout (`code`)."},
    503: {"description": "The deployment has not set the SQL endpoint up (PostgreSQL role)."}})
def run_sql(body: SqlBody, request: Request,
            account: Account = Depends(current_account)) -> dict[str, Any]:
    """Tables: `traces`, `scores`, `action_scores`, `reward_models`, each holding only your
    rows. At most `STASH_SQL_MAX_ROWS` rows (`truncated` says when there were more)."""
    settings = request.app.state.settings
    return sql.run(request.app.state.sql, account.id, body.sql, max_rows=settings.sql_max_rows,
                   timeout_s=settings.sql_timeout_s)
