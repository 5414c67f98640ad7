"""What every run that drives the worker shares: its pool, its time limit, how a failure reads."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import dagster as dg

from stash_pipeline.compute.outcome import WorkerFailed
from stash_pipeline.core.errors import StashError
from stash_pipeline.core.failures import reason_line
from stash_pipeline.defs.step_leases import SecondStart

# Reward work runs one job at a time, like the seed's Celery worker with concurrency 1 (the pool's
# limit is in dagster.yaml).
REWARD_POOL = "reward_worker"
# Run monitoring fails a run past this (dagster.yaml enables it); the worker has its own limits.
MAX_RUNTIME_S = 4 * 3600


def failure_text(error: BaseException) -> str:
    """What a failed step says: the worker log's tail, a StashError's words, else the type too."""
    if isinstance(error, WorkerFailed):
        return error.reason
    if isinstance(error, StashError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def failure_description(error: BaseException) -> str:
    """A step failure's description: the one-line reason first (the worker ends its log with it),
    then the whole text (the tail of worker.log) below it."""
    text = failure_text(error)
    first = reason_line(text)
    return text if not first or first == text.strip() else f"{first}\n\n{text}"


@contextmanager
def failing_step(on_failure: Callable[[Exception], None] | None = None) -> Iterator[None]:
    """The one way a step's error becomes its failure: any error of the block first goes to
    ``on_failure`` (a personal model's steps mark the model failed with ``failure_text``), then
    fails the step with ``failure_description`` (a ``dg.Failure`` passes as it is)."""
    try:
        yield
    except Exception as error:
        # A second start of a step another process works (defs.step_leases) changes nothing.
        if on_failure is not None and not isinstance(error, SecondStart):
            on_failure(error)
        if isinstance(error, dg.Failure):
            raise
        raise dg.Failure(description=failure_description(error)) from error
