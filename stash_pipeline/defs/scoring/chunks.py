"""How many traces a background chunk takes: as many as its worker scores in about
``STASH_CHUNK_SECONDS`` (30 s), measured from the latest chunks, so that a request waits for one
short chunk at most and a backlog of millions of traces is worked in a few thousand runs, not one
per 50 traces. ``STASH_SCORING_BATCH`` fixes the size instead. Each evaluator's chunks are sized
from its own latest chunks where there are some. A size is an estimate: a chunk's run also gives
its worker ``chunk_seconds()`` as a work budget (``JobSettings.work_seconds``), which the worker
honours between groups of traces, so the first chunk, a slower evaluator or long traces stop in
time too; what they did not start stays queued."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import dagster as dg

from stash_pipeline.core.validation import positive_setting
from stash_pipeline.defs.resources import SharedEvaluatorResource

CHUNK_SECONDS_ENV = "STASH_CHUNK_SECONDS"
DEFAULT_CHUNK_SECONDS = 30
# The most traces a chunk takes whatever the worker's speed: its run config lists them.
MAX_CHUNK_TRACES = 2000
# The chunks whose speed sets the next size: the latest few, so a slower evaluator counts soon.
MEASURED_CHUNKS = 5
# The latest chunks searched for an evaluator's own: its speed is its chunks' (a personal model on
# a bigger base scores slower than the release), the latest chunks' of any evaluator without.
SEARCHED_CHUNKS = 50
# The one scoring asset (defs.scoring.assets.trace_scores), whose materialisations say how fast
# its chunks went, in this metadata.
SCORING_ASSET = dg.AssetKey("trace_scores")
SCORED_TRACES = "scored_traces"
# The "request" metadata of the runs measured: chunks (a background one, the first of a Score
# again of an owner's every trace), not a Score again of a few chosen traces, whose worker start
# would make a chunk's speed look slow.
CHUNK_RUNS = ("auto", "score again")
WORK_SECONDS = "work_seconds"


def chunk_seconds() -> int:
    """``STASH_CHUNK_SECONDS``: the work a background chunk holds the worker for, about."""
    return positive_setting(CHUNK_SECONDS_ENV,
                            os.environ.get(CHUNK_SECONDS_ENV) or DEFAULT_CHUNK_SECONDS)


def traces_per_second(instance: dg.DagsterInstance, asset_key: dg.AssetKey,
                      evaluator: str | None = None) -> float | None:
    """The latest chunks' traces scored per second of their step (worker start, checkpoint load
    and storing included, so sizes converge on chunks of the target's length) of the chunks
    (``CHUNK_RUNS``): ``evaluator``'s
    own latest when SEARCHED_CHUNKS hold some, else any evaluator's; None before any chunk was
    measured."""
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=asset_key),
                                              limit=SEARCHED_CHUNKS, ascending=False).records
    measured = [meta for meta in (r.asset_materialization.metadata for r in records)
                if SCORED_TRACES in meta and WORK_SECONDS in meta
                and ("request" not in meta or meta["request"].value in CHUNK_RUNS)]
    own = [meta for meta in measured
           if evaluator is not None and "evaluator" in meta
           and meta["evaluator"].value == evaluator]
    traces = seconds = 0.0
    for meta in (own or measured)[:MEASURED_CHUNKS]:
        traces += float(meta[SCORED_TRACES].value)
        seconds += float(meta[WORK_SECONDS].value)
    return traces / seconds if traces and seconds > 0 else None


def chunk_size(instance: dg.DagsterInstance, asset_key: dg.AssetKey, *, fixed: int | None,
               first: int, evaluator: str | None = None) -> int:
    """Traces the next background chunk (of ``evaluator``) takes: ``fixed`` when set
    (``STASH_SCORING_BATCH``), else ``chunk_seconds()`` of the measured speed (``first`` before
    any measurement), within 1 and MAX_CHUNK_TRACES. The size is an estimate; the worker's
    budget (``work_seconds``) is what bounds the chunk."""
    if fixed is not None:
        return fixed
    rate = traces_per_second(instance, asset_key, evaluator)
    if rate is None:
        return first
    return max(1, min(MAX_CHUNK_TRACES, int(rate * chunk_seconds())))


def next_chunk_size(instance: dg.DagsterInstance,
                    settings: SharedEvaluatorResource | None = None,
                    evaluator: str | None = None) -> int:
    """``chunk_size`` of the one scoring asset's chunks (``evaluator``'s), with the deployment's
    settings (a SharedEvaluatorResource; its environment without one)."""
    settings = settings or SharedEvaluatorResource()
    return chunk_size(instance, SCORING_ASSET, fixed=settings.fixed_batch_size(),
                      first=settings.batch_size(), evaluator=evaluator)


def chunk_sizes(instance: dg.DagsterInstance,
                settings: SharedEvaluatorResource | None = None) -> Callable[[str | None], int]:
    """``next_chunk_size`` by evaluator, each read once (a sensor tick's)."""
    return functools.cache(lambda evaluator: next_chunk_size(instance, settings, evaluator))
