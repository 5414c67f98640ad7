"""What an importer yields for each source record: one trace and the feedback that came with it."""

from __future__ import annotations

from dataclasses import dataclass

from stash_pipeline.core.feedback import Feedback, Review
from stash_pipeline.core.traces import Trace


@dataclass(frozen=True)
class ImportedTrace:
    trace: Trace
    feedback: tuple[Feedback, ...] = ()
    source: str = ""  # "<file>:<line or index>", for errors and progress
    format: str | None = None  # the importer that read it (openai, tau2, ...), for import counts
    reviews: tuple[Review, ...] = ()  # of stored comparisons (or of ones imported with it)
