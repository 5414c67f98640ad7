"""The HTTP API (docs/api.md): the seed's ``/api/v1/rm/...`` routes, traces, feedback and SQL."""

from stash_pipeline.api.app import create_app

__all__ = ["create_app"]
