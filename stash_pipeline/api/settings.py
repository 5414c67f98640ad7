"""The API's limits, read once from the environment (README, "Configuration")."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from stash_pipeline.core.errors import InputError


@dataclass(frozen=True)
class ApiSettings:
    max_import_bytes: int = 100 * 1024 * 1024  # POST /api/v1/traces
    max_json_bytes: int = 8 * 1024 * 1024  # every other body (100k trace ids fit)
    sql_max_rows: int = 1000
    sql_timeout_s: float = 5.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ApiSettings:
        environ = os.environ if environ is None else environ
        defaults = cls()
        return cls(
            max_import_bytes=_number(environ, "STASH_API_MAX_IMPORT_BYTES",
                                     defaults.max_import_bytes, int),
            max_json_bytes=defaults.max_json_bytes,
            sql_max_rows=_number(environ, "STASH_SQL_MAX_ROWS", defaults.sql_max_rows, int),
            sql_timeout_s=_number(environ, "STASH_SQL_TIMEOUT_S", defaults.sql_timeout_s, float),
        )


def _number(environ: Mapping[str, str], name: str, default, kind):
    text = environ.get(name)
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        raise InputError(f"{name} must be a positive number", field=name) from None
    if not value > 0:
        raise InputError(f"{name} must be a positive number", field=name)
    return value
