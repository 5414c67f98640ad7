"""Why the SQL endpoint did not answer a query: the caller's fault (422) or the deployment's
(503)."""

from __future__ import annotations

from stash_pipeline.core.errors import InputError, StashError


class SqlRefused(InputError):
    """A query the endpoint will not run, or that the database refused; names the field ``sql``."""

    def __init__(self, message: str, *, code: str = "refused"):
        super().__init__(message, record="request", field="sql")
        self.code = code  # "refused", "invalid" (the database's error) or "timeout"


def timed_out(timeout_s: float) -> SqlRefused:
    """The answer to a query that ran past the statement timeout (both databases)."""
    return SqlRefused(f"the query ran past the {timeout_s:g} s statement timeout; narrow it (a "
                      "WHERE clause, fewer rows or joins) or ask the operator for a longer "
                      "STASH_SQL_TIMEOUT_S", code="timeout")


class SqlUnavailable(StashError):
    """The deployment cannot run caller SQL (e.g. no reader role); the message says what to do."""


class SqlBusy(SqlUnavailable):
    """Every query slot stayed taken for the whole statement timeout: try again (503)."""
