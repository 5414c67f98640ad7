"""What an importer yields for each source record: one trace and the feedback that came with it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stash_pipeline.core.feedback import Feedback, Review
from stash_pipeline.core.traces import Trace


@dataclass(frozen=True)
class ImportedTrace:
    trace: Trace
    feedback: tuple[Feedback, ...] = ()
    source: str = ""  # "<file>:<line or index>", for errors and progress
    format: str | None = None  # the importer that read it (openai, tau2, ...), for import counts
    reviews: tuple[Review, ...] = ()  # of stored comparisons (or of ones imported with it)
    # The trace, feedback and reviews core.validation cleared: an importer sets it after
    # validating the record under its limits (never above the store's caps), so that the store
    # does not check them a second time; an import validates each record once.
    cleared: tuple[Any, ...] | None = field(default=None, compare=False, repr=False)

    @property
    def is_cleared(self) -> bool:
        """Whether this very trace, feedback and reviews were cleared: a record built elsewhere,
        or changed with ``replace`` since, is checked again by the store."""
        return self.cleared is not None and all(
            a is b for a, b in zip(self.cleared, (self.trace, self.feedback, self.reviews)))
