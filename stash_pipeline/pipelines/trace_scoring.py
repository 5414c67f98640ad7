"""Scoring traces with a saved checkpoint, without Dagster: every ``trace_scores`` run, the one
scoring path. Score again for selected traces (the released shared evaluator by default, or a
personal model; Score actions optional; ``services.score_again`` queues them), Score again of a
model's whole owner set, and the background chunks of the scoring queue (``store.scoring_work``):
the current release's action credit of every trace version it has not scored, and the kept-current
personal models' scores of their owners' traces.

The seed: "Score again requests a fresh run of the saved checkpoint without labeling calls or
retraining. Advanced options let you select a personal model and choose Score actions. Older
personal models need new training with action comparisons."
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stash_pipeline.compute.contract import (
    CHECKPOINT_INPUT,
    JobSettings,
    job_directory,
    remove_job,
    write_job,
)
from stash_pipeline.compute.run import run_job
from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.pipelines.worker_io import JobResults, read_results, traces_in_chunks
from stash_pipeline.store import Release, RewardModelRecord, Store
from stash_pipeline.store.scoring_work import models_kept_current  # noqa: F401  (its home was here)

SCORING_DIR = "scoring"  # under RM_ARTIFACT_DIR
NEEDS_ACTION_TRAINING = ("this reward model was not trained on action comparisons, so it cannot "
                         "score actions: older personal models need new training with action "
                         "comparisons")
RunWorker = Callable[[Path, str], Any]  # a step's ComputeResource.worker


@dataclass(frozen=True)
class Scorer:
    """A saved checkpoint that scores: the current release or a succeeded personal model."""

    evaluator: str  # the release version or the model id
    checkpoint_uri: str
    shared: bool
    scores_actions: bool  # trained on action comparisons (a release always scores actions)


def release_scorer(release: Release) -> Scorer:
    """A release as a scorer: it always scores actions."""
    return Scorer(release.version, release.checkpoint_uri, True, True)


def model_scorer(model: RewardModelRecord) -> Scorer:
    """A personal model as a scorer; NotFoundError unless it succeeded with a checkpoint."""
    if model.status != "succeeded" or not model.checkpoint_uri:
        raise NotFoundError(f"reward model {model.id} has no checkpoint to score with: it is "
                            f"{model.status}")
    return Scorer(model.id, model.checkpoint_uri, False,
                  bool((model.metrics or {}).get("action_scoring_version")))


def scorer_of(store: Store, evaluator: str) -> Scorer:
    """The scorer an evaluator tag names (a release version or a personal model id)."""
    if any(r.version == evaluator for r in store.list_releases()):
        return release_scorer(store.get_release(evaluator))
    return model_scorer(store.get_reward_model(evaluator))


def owner_traces(store: Store, model_id: str, first_chunk: int) -> dict[str, int]:
    """Score again of the model over its owner's every trace (`rm score`): every one queued for
    it in the scoring queue (``Store.queue_score_again``, kept until scored), and the first
    ``first_chunk`` of them ({trace id: version}), which the request's own run scores; the rest
    are worked by the queue's bounded chunks like any other scoring."""
    model_scorer(store.get_reward_model(model_id))  # a model without a checkpoint queues nothing
    store.queue_score_again(model_id)
    return {w.trace_id: w.trace_version
            for w in store.scoring_work(personal=True, evaluator=model_id, limit=first_chunk)}


# The run tag that names a Score again request's run (its state is read from that run).
SCORING_REQUEST_TAG = "stash/scoring_request"


def request_run_key(run_ref: str) -> str:
    """One scoring run per Score again request (``ScoringRequest.run_ref``: a request made before
    0012 keeps the key its integer id gave it)."""
    return f"scoring-request:{run_ref}"


def score(store: Store, evaluator: str, traces: Mapping[str, int], *, actions: bool,
          run: RunWorker, artifact_dir: str | Path, name: str,
          whole_traces: bool = True, work_seconds: float | None = None) -> JobResults:
    """A fresh run of the evaluator's saved checkpoint over these traces: whole-trace scores
    (raw and calibrated) unless ``whole_traces`` is off (a release's background chunks: action
    credit only), and each action's credit with ``actions``; stored as one replacement of that
    evaluator's scores of them, a release's action scores with its scoring marks. A trace
    reimported since is scored at its new version; a version replaced while this ran is dropped
    by the store (and stays pending).

    ``work_seconds``: the worker's budget (``JobSettings.work_seconds``, a chunk's). A job that
    spends it stops between groups of traces; only the traces it finished are stored and leave
    the scoring queue (``JobResults.finished``), the others stay queued for the next chunk."""
    chosen = scorer_of(store, evaluator)
    if actions and not chosen.scores_actions:
        raise InputError(NEEDS_ACTION_TRAINING, field="actions")
    if not (whole_traces or actions):
        raise InputError("a scoring run scores whole traces, actions or both",
                         field="whole_traces")
    scored = list(traces_in_chunks(store, list(traces)))
    outputs = (("scores",) if whole_traces else ()) + (("action_scores",) if actions else ())
    job_dir = job_directory(artifact_dir, SCORING_DIR, evaluator, name)
    results = run_job(
        job_dir,
        lambda d: write_job(d, JobSettings(evaluator=evaluator, checkpoint=CHECKPOINT_INPUT,
                                           outputs=outputs, work_seconds=work_seconds),
                            score_traces=scored),
        lambda d: run(d, chosen.checkpoint_uri),
        lambda d: read_results(d, evaluator,
                               scored={t.id: t.version for t in scored} if actions else None),
        finished=remove_job)  # scoring runs all the time: keep no scratch
    if chosen.shared:
        store.save_release_scores(evaluator, results.scores, results.scored,
                                  results.action_scores)
    else:
        store.replace_scores(evaluator, scores=results.scores, scored=results.scored,
                             action_scores=results.action_scores)
    return results


@dataclass(frozen=True)
class ScoringBatch:
    """One background chunk of the scoring queue: the traces (at the versions queued) one
    evaluator scores in one run, and what it stores (``score``'s ``actions``, ``whole_traces``)."""

    evaluator: str
    actions: bool
    whole_traces: bool
    traces: dict[str, int]  # {trace id: version}


def pending_batches(store: Store, *, batch_size: int | Callable[[str | None], int], runs: int,
                    skip: set[tuple[str, str, int]],
                    busy: frozenset[str] = frozenset()) -> list[ScoringBatch]:
    """The scoring queue's next ``runs`` batches of ``batch_size`` traces at most (a number, or
    a function of the evaluator: its chunks' measured size), none of the (evaluator, trace id,
    version) in ``skip`` (already handed out) nor of an evaluator in ``busy`` (a Score again
    run of its owner's every trace is working its queue's head): first the personal models'
    oldest work (the kept-current models', and what a Score again queued; whole-trace scores,
    actions when the model was trained on action comparisons), then the current release's
    (action credit and its scoring marks, as the release's auto-scoring always stored). A
    bounded number of queries whatever the number of models: a page of each queue, and the
    page's models' settings."""
    size_of = batch_size if callable(batch_size) else (lambda _evaluator: batch_size)
    batches = _personal_batches(store, size_of, runs * size_of(None), skip, busy)[:runs]
    release = store.latest_release()
    left = runs - len(batches)
    if release is None or left <= 0:
        return batches
    batch_size = size_of(release.version)
    covered = {(trace_id, version) for evaluator, trace_id, version in skip
               if evaluator == release.version}
    work = [(w.trace_id, w.trace_version)
            for w in store.scoring_work(personal=False, evaluator=release.version,
                                        limit=left * batch_size + len(covered))
            if (w.trace_id, w.trace_version) not in covered][:left * batch_size]
    return batches + [ScoringBatch(release.version, True, False, dict(work[i:i + batch_size]))
                      for i in range(0, len(work), batch_size)]


def _personal_batches(store: Store, size_of: Callable[[str | None], int], room: int,
                      skip: set[tuple[str, str, int]],
                      busy: frozenset[str]) -> list[ScoringBatch]:
    """The personal models' oldest queued trace versions (store.scoring_work), ``room`` traces
    at most, in batches of one model each, of that model's chunk size."""
    work = [w for w in store.scoring_work(personal=True, limit=room + len(skip), besides=busy)
            if (w.evaluator, w.trace_id, w.trace_version) not in skip][:room]
    actions = store.scoring_models([w.evaluator for w in work])
    by_model: dict[str, list[tuple[str, int]]] = {}
    for w in work:
        if w.evaluator in actions:  # a model no longer succeeded scores nothing
            by_model.setdefault(w.evaluator, []).append((w.trace_id, w.trace_version))
    return [ScoringBatch(model_id, actions[model_id], True, dict(pending[i:i + size]))
            for model_id, pending in by_model.items()
            for size in (size_of(model_id),)
            for i in range(0, len(pending), size)]
