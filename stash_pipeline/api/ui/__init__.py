"""The trace viewer (docs/viewer.md): server-rendered pages under ``/ui`` in the API's process."""

from fastapi import FastAPI

from stash_pipeline.api.ui import pages, trust_pages


def install(app: FastAPI) -> None:
    """The viewer's pages, static files and error pages (``pages.install``), and its trust
    reports."""
    pages.install(app)
    app.include_router(trust_pages.router)


__all__ = ["install"]
