"""The trace viewer (docs/viewer.md): server-rendered pages under ``/ui`` in the API's process."""

from fastapi import FastAPI

from stash_pipeline.api.ui import bulk_pages, compare_pages, pages, review_pages, trust_pages


def install(app: FastAPI) -> None:
    """The viewer's pages, static files and error pages (``pages.install``), its trust reports,
    and its review loop. The bulk actions' routes go first: ``/ui/traces/bulk/...`` must not
    read as a trace called "bulk"."""
    pages.install(app, first=(bulk_pages.router, compare_pages.router, review_pages.router))
    app.include_router(trust_pages.router)


__all__ = ["install"]
