"""Ids and query values with a NUL character name nothing stored: PostgreSQL cannot even compare
them, so both databases answer alike before the store is asked."""

from __future__ import annotations

from fastapi import Request

from stash_pipeline.core.errors import InputError, NotFoundError


def readable_ids(request: Request) -> None:
    """404 for such an id in the path, 422 for such a query parameter."""
    for name, value in request.path_params.items():
        if "\x00" in str(value):
            raise NotFoundError(f"no {name.removesuffix('_id')} with that id")
    for name, value in request.query_params.items():
        if "\x00" in value:
            raise InputError("cannot contain NUL characters", field=name)
