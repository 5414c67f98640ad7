"""The trace viewer (docs/viewer.md): server-rendered pages under ``/ui`` in the API's process.

``frame`` is what every page stands on; each ``*_pages`` module is one router of pages, and none
imports another (``stash_pipeline_tests/test_layers.py``): what two of them show alike lives below
them (``views``, ``trace_list``, ``progress``)."""

from fastapi import FastAPI

from stash_pipeline.api.ui import (
    bulk_pages,
    compare_pages,
    frame,
    login_pages,
    model_pages,
    progress_pages,
    review_pages,
    trace_pages,
    trust_pages,
)


def install(app: FastAPI) -> None:
    """The viewer's pages, static files and error pages (``frame.install``). The bulk actions'
    routes go first: ``/ui/traces/bulk/...`` must not read as a trace called "bulk"."""
    frame.install(app, (bulk_pages.router, compare_pages.router, review_pages.router,
                        login_pages.router, trace_pages.router, model_pages.router,
                        progress_pages.router, trust_pages.router))


__all__ = ["install"]
