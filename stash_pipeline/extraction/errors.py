"""Extraction failures: each names the trace, the action (when there is one) and what was wrong."""

from __future__ import annotations

from stash_pipeline.core.errors import StashError


class ExtractionError(StashError):
    """An invalid extraction or a failed request: fails the job (seed: invalid extraction fails)."""

    def __init__(self, reason: str, *, trace_id: str, action_id: str | None = None):
        self.trace_id, self.action_id, self.reason = trace_id, action_id, reason
        where = f"trace {trace_id}" + (f", action {action_id}" if action_id else "")
        super().__init__(f"feedback extraction failed for {where}: {reason}")


class MissingApiKeyError(StashError):
    """Extraction is needed but no Anthropic key is configured."""

    def __init__(self, pending_traces: int):
        self.pending_traces = pending_traces
        super().__init__(
            f"feedback extraction needs an Anthropic API key: {pending_traces} selected trace(s) "
            "have comments, later user messages or actions to assess. Set ANTHROPIC_API_KEY, "
            "or STASH_EXTRACTION=off to train on ratings, comparisons and outcomes alone "
            "(see docs/annotations.md).")
