"""The API's limits, read once from the environment (README, "Configuration")."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.requests import base_model_dirs
from stash_pipeline.serving.protocol import (
    DEFAULT_REWARDS_MAX_BYTES,
    DEFAULT_SCORING_URL,
    DEFAULT_TIMEOUT_S,
    REWARDS_MAX_BYTES_ENV,
    SCORING_TIMEOUT_ENV,
    scoring_url_from_env,
)


@dataclass(frozen=True)
class ApiSettings:
    max_import_bytes: int = 100 * 1024 * 1024  # POST /api/v1/traces
    max_json_bytes: int = 8 * 1024 * 1024  # every other body (100k trace ids fit)
    sql_max_rows: int = 1000
    sql_timeout_s: float = 5.0
    sql_concurrency: int = 4  # queries running at once; more wait up to the timeout, then 503
    write_concurrency: int = 8  # writing requests in threads at once; more wait on the event loop
    base_model_dirs: tuple[str, ...] = ()  # where a request's local base_model may be
    max_rewards_bytes: int = DEFAULT_REWARDS_MAX_BYTES  # the /rewards routes' bodies
    scoring_url: str = DEFAULT_SCORING_URL  # the scoring server (stash-pipeline serve)
    scoring_timeout_s: float = DEFAULT_TIMEOUT_S  # what a /rewards call waits at most
    scoring_token: str | None = None  # None: derived from the signing key when first needed

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
            sql_concurrency=_number(environ, "STASH_SQL_CONCURRENCY", defaults.sql_concurrency,
                                    int),
            write_concurrency=_number(environ, "STASH_API_WRITE_CONCURRENCY",
                                      defaults.write_concurrency, int),
            base_model_dirs=base_model_dirs(environ),
            max_rewards_bytes=_number(environ, REWARDS_MAX_BYTES_ENV, defaults.max_rewards_bytes,
                                      int),
            scoring_url=scoring_url_from_env(environ),
            scoring_timeout_s=_number(environ, SCORING_TIMEOUT_ENV, defaults.scoring_timeout_s,
                                      float),
        )


@dataclass(frozen=True)
class ServerSettings:
    """The HTTP server's timeouts and connection limit (``api.server``, docs/api.md)."""

    header_timeout_s: float = 10.0  # request line and headers, from connect or last response
    body_timeout_s: float = 120.0  # the whole body, from its head: 100 MiB needs 0.85 MiB/s
    idle_timeout_s: float = 5.0  # a kept-alive connection without a new request
    max_connections: int = 200  # open connections; one more is closed at once
    shutdown_timeout_s: float = 10.0  # Ctrl-C: requests still running then are cancelled

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServerSettings:
        environ = os.environ if environ is None else environ
        defaults = cls()
        return cls(**{
            name: _number(environ, variable, getattr(defaults, name), kind)
            for name, variable, kind in (
                ("header_timeout_s", "STASH_API_HEADER_TIMEOUT_S", float),
                ("body_timeout_s", "STASH_API_BODY_TIMEOUT_S", float),
                ("idle_timeout_s", "STASH_API_IDLE_TIMEOUT_S", float),
                ("max_connections", "STASH_API_MAX_CONNECTIONS", int),
                ("shutdown_timeout_s", "STASH_API_SHUTDOWN_TIMEOUT_S", float))})


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
