"""The steps of a personal reward model's run, without Dagster: the pipeline's assets call them.

pairs (build, extract, cap) -> split -> job (inputs for the worker) -> outcome (scores and metrics
stored with the status change). Every step reads and writes the store; the worker in between runs
through ``compute``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stash_pipeline.compute.contract import JobSettings, write_job
from stash_pipeline.compute.upload import discard_results
from stash_pipeline.core.split import PairSplit
from stash_pipeline.core.traces import Trace
from stash_pipeline.extraction.config import ExtractionConfig
from stash_pipeline.objects.keys import reward_model_checkpoint_key
from stash_pipeline.pipelines.training_pairs import training_pairs
from stash_pipeline.pipelines.worker_io import JobResults, split_stored_pairs, traces_in_chunks
from stash_pipeline.store import RewardModelRecord, StatusError, Store


def attempt_name(attempt: int) -> str:
    """An attempt's folder, in the scratch (``job_directory(scratch, model id, ...)``) and in the
    object store (``reward_model_checkpoint_key(model id, ...)``): one of each per attempt, so an
    old attempt's outputs are never read as new ones."""
    return f"attempt-{attempt}"


def start(store: Store, model_id: str, run_id: str, *, retry: bool = False) -> RewardModelRecord:
    """The model's attempt taken up by this run, which it records; the model stays queued until
    its training step holds the worker (``hold_worker``). ``retry`` (a re-executed run) requeues a
    failed model."""
    model = store.get_reward_model(model_id)
    if retry and model.status == "failed":
        store.requeue(model_id)
    store.assign_run(model_id, run_id)
    return store.get_reward_model(model_id)


def hold_worker(store: Store, model_id: str, run_id: str) -> RewardModelRecord:
    """The training step holds the worker: a queued model is running from now on (the seed's
    queued -> running)."""
    if store.get_reward_model(model_id).status == "queued":
        store.mark_running(model_id, run_id)
    return store.get_reward_model(model_id)


def resume(store: Store, model_id: str, run_id: str, parent_run_id: str | None, *,
           same_attempt: bool) -> RewardModelRecord:
    """The model of a step that begins a re-execution of the run that failed it (Dagster's
    re-execute from failure): it runs again in this run, as a new attempt whose outputs this run
    rebuilds or, with ``same_attempt`` (the storing step), as the failed attempt, whose
    handed-over results it stores. Any other model is left as it is."""
    model = store.get_reward_model(model_id)
    if parent_run_id is None or model.status != "failed" or model.run_id != parent_run_id:
        return model
    if not same_attempt:
        return start(store, model_id, run_id, retry=True)
    store.resume(model_id, run_id)
    return store.get_reward_model(model_id)


def build_pairs(store: Store, model: RewardModelRecord,
                config: ExtractionConfig | None = None) -> dict[str, Any]:
    """Build, extract and cap the pairs of the request's traces only; store them; the report."""
    traces = store.get_traces(model.trace_ids)
    feedback = store.feedback_for(list(model.trace_ids))
    assembled = training_pairs(traces, feedback, audience="personal",
                               max_pairs=model.max_pairs, config=config)
    store.save_pairs(assembled.pairs, reward_model_id=model.id)
    return assembled.report


def split(store: Store, model: RewardModelRecord) -> PairSplit:
    """The one split over the stored pairs, labelled in the store; NotEnoughPairsError under two."""
    return split_stored_pairs(store, reward_model_id=model.id)


def traces_scored_in_training(store: Store, model: RewardModelRecord,
                              limit: int) -> Iterator[Trace]:
    """What the training job scores once trained: ``limit`` of the owner's traces at most (one
    bounded chunk of work: the request's own traces first), read a chunk at a time. The rest
    of the owner's traces are queued for the model as it succeeds (``store.mark_succeeded``)
    and scored in background chunks like any other scoring."""
    chosen = set(model.trace_ids)
    ids = [*model.trace_ids, *(i for i in store.trace_ids(owner=model.owner) if i not in chosen)]
    return traces_in_chunks(store, ids[:limit])


def write_training_job(store: Store, model: RewardModelRecord, job_dir: Path, *,
                       score_limit: int) -> JobSettings:
    """The worker's inputs: the stored split's pairs, and the owner's traces it scores once
    trained (``traces_scored_in_training``)."""
    excluded = len(store.load_pairs(reward_model_id=model.id, split="excluded"))
    settings = JobSettings(evaluator=model.id, audience="personal", base_model=model.base_model,
                           epochs=model.epochs, excluded_cross_trace_pairs=excluded)
    write_job(job_dir, settings,
              train_pairs=store.load_pairs(reward_model_id=model.id, split="train"),
              eval_pairs=store.load_pairs(reward_model_id=model.id, split="eval"),
              score_traces=traces_scored_in_training(store, model, score_limit))
    return settings


def succeed(store: Store, model_id: str, results: JobResults, checkpoint_uri: str) -> None:
    """Metrics, checkpoint and the training job's scores land in the one transaction that marks
    the model succeeded, which queues the owner's traces it has not scored yet."""
    store.mark_succeeded(model_id, metrics=results.metrics, checkpoint_uri=checkpoint_uri,
                         scores=results.scores, action_scores=results.action_scores,
                         scored=results.scored, untrained=results.untrained)


def fail(store: Store, model_id: str, reason: str) -> bool:
    """Mark the model failed with ``reason``; False when it had already finished (nothing to do)."""
    try:
        store.mark_failed(model_id, reason)
    except StatusError:
        return False
    return True


def discard_checkpoint(store: Store, objects: Any, model_id: str) -> None:
    """A failed attempt's uploaded archive and handed-over results go: a failed model has no
    visible checkpoint."""
    model = store.get_reward_model(model_id)
    if model.status != "succeeded":
        discard_attempt(objects, model_id, model.attempt)


def discard_attempt(objects: Any, model_id: str, attempt: int) -> None:
    """An attempt's archive and handed-over results, where there are any, go."""
    key = reward_model_checkpoint_key(model_id, attempt_name(attempt))
    objects.delete(objects.uri_for(key))
    discard_results(objects, key)
