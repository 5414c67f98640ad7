"""Why the SQL endpoint did not answer a query: the caller's fault (422) or the deployment's
(503)."""

from __future__ import annotations

from stash_pipeline.core.errors import InputError, StashError


class SqlRefused(InputError):
    """A query the endpoint will not run, or that the database refused; names the field ``sql``."""

    def __init__(self, message: str, *, code: str = "refused"):
        super().__init__(message, record="request", field="sql")
        self.code = code  # "refused", "invalid" (the database's error) or "timeout"


class SqlUnavailable(StashError):
    """The deployment cannot run caller SQL (e.g. no reader role); the message says what to do."""


class SqlBusy(SqlUnavailable):
    """Every query slot stayed taken for the whole statement timeout: try again (503)."""
