"""The trace viewer (docs/viewer.md): server-rendered pages under ``/ui`` in the API's process."""

from stash_pipeline.api.ui.pages import install

__all__ = ["install"]
