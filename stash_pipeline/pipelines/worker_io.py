"""What every pipeline that runs the worker shares: the stored split, traces read a chunk at a time,
and a finished job's results as store rows (personal models and the shared evaluator alike)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stash_pipeline.compute.contract import (
    ACTION_SCORES,
    FINISHED,
    SCORES,
    read_jsonl,
    read_metrics,
)
from stash_pipeline.compute.upload import fetch_results
from stash_pipeline.core.split import PairSplit, split_pairs
from stash_pipeline.core.traces import Trace
from stash_pipeline.store import ActionScore, Store, TraceScore

TRACE_CHUNK = 500  # traces read from the store at a time while a job's inputs are written


@dataclass(frozen=True)
class JobResults:
    """What a finished worker job gives the store: metrics and the model's scores."""

    metrics: dict[str, Any]
    scores: tuple[TraceScore, ...]
    action_scores: tuple[ActionScore, ...]
    scored: dict[str, int]  # {trace id: version} of every trace the action scorer covered
    # The untrained base's raw rewards (a training job's: the trust report's baseline).
    untrained: tuple[TraceScore, ...] = ()
    # {trace id: version} a job with a work budget finished (its scores cover these only);
    # None: a job without one, which scored every trace it was given.
    finished: dict[str, int] | None = None


def split_stored_pairs(store: Store, *, reward_model_id: str | None = None,
                       candidate: str | None = None) -> PairSplit:
    """The one split over a model's (or candidate's) stored pairs, labelled in the store;
    NotEnoughPairsError under two."""
    owner = {"reward_model_id": reward_model_id, "candidate": candidate}
    pairs = store.load_pairs(**owner)
    result = split_pairs(pairs)
    labels = {pair.id: "excluded" for pair in pairs}
    labels.update({pair.id: "train" for pair in result.train})
    labels.update({pair.id: "eval" for pair in result.eval})
    store.save_split(labels, **owner)
    return result


def traces_in_chunks(store: Store, ids: Sequence[str]) -> Iterator[Trace]:
    """The traces with these ids, read a chunk at a time (a job may score a great many)."""
    for start in range(0, len(ids), TRACE_CHUNK):
        yield from store.get_traces(ids[start:start + TRACE_CHUNK])


def read_results(job_dir: Path, evaluator: str,
                 scored: Mapping[str, int] | None = None) -> JobResults:
    """metrics.json, scores.jsonl and action_scores.jsonl of a finished job, as store rows.

    ``scored`` names the traces the job gave the action scorer ({id: version}); without it they
    are read from scores.jsonl. Every one of them is marked scored, also one without actions.
    A job that stopped at its work budget finished only the traces finished_traces.jsonl lists:
    only those are read and marked (``finished``); the others were not scored.
    """
    metrics = read_metrics(job_dir)  # this attempt's, or an InputError
    finished = ({r["trace_id"]: r["trace_version"] for r in read_jsonl(job_dir / FINISHED)}
                if (job_dir / FINISHED).is_file() else None)

    def done(row: Mapping[str, Any]) -> bool:
        return finished is None or finished.get(row["trace_id"]) == row["trace_version"]

    rows = [r for r in read_jsonl(job_dir / SCORES) if done(r)]
    scores = tuple(TraceScore(r["trace_id"], r["trace_version"], evaluator, r["score"],
                              r.get("calibrated"), r.get("input_tokens")) for r in rows)
    actions = tuple(ActionScore(r["action_id"], r["trace_id"], r["trace_version"], evaluator,
                                r["raw_reward"], r["credit"], r.get("input_tokens"))
                    for r in read_jsonl(job_dir / ACTION_SCORES) if done(r))
    if not (job_dir / ACTION_SCORES).is_file():
        marked: dict[str, int] = {}
    elif scored is not None:
        marked = {tid: v for tid, v in scored.items() if done({"trace_id": tid,
                                                                "trace_version": v})}
    else:
        marked = {s.trace_id: s.trace_version for s in scores}
    untrained = tuple(TraceScore(r["trace_id"], r["trace_version"], evaluator, r["untrained"])
                      for r in rows if r.get("untrained") is not None)
    return JobResults(metrics, scores, actions, marked, untrained, finished)


def handed_over_results(objects: Any, checkpoint_key: str, evaluator: str) -> JobResults:
    """``read_results`` of the job that trained ``checkpoint_key``, from what its step handed over
    to the object store (``compute.upload.hand_over_results``): a later step runs in any task,
    with or without the scratch of the step that ran the worker."""
    with tempfile.TemporaryDirectory(prefix="handed-over-") as folder:
        return read_results(fetch_results(objects, checkpoint_key, Path(folder)), evaluator)


def read_losses(path: Path) -> list[float]:
    return json.loads(path.read_text()) if path.is_file() else []
