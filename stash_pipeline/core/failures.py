"""A failure's one-line reason, shown before the log it ends (``rm show``, the viewer)."""

from __future__ import annotations


def reason_line(error: str | None) -> str | None:
    """The last line of ``error`` that says something: the worker ends its log with
    ``job failed in phase <phase>: <Error>: <reason>``, and other failures are one line."""
    if not error:
        return None
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    return lines[-1] if lines else None
