"""Reward models and their status: queued -> running -> succeeded | failed."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from stash_pipeline.core.errors import InputError, NotFoundError, StashError
from stash_pipeline.core.failures import hide_server_paths
from stash_pipeline.core.requests import RewardModelRequest
from stash_pipeline.core.training_settings import ERROR_TAIL_CHARS
from stash_pipeline.store import schema, scoring_work
from stash_pipeline.store.batching import chunks
from stash_pipeline.store.scores import (
    ActionScore,
    TraceScore,
    save_action_scores,
    save_scores,
    save_untrained_scores,
)

STATUSES = ("queued", "running", "succeeded", "failed")
# Extraction and the pair count are checked after queueing, so a queued job may fail directly.
# A failed model may run again once requeued (`rm retry`, or a re-executed Dagster run).
_NEXT = {"queued": {"running", "failed"}, "running": {"succeeded", "failed"},
         "failed": {"queued"}}

rm = schema.reward_models


class StatusError(StashError):
    """A status change the lifecycle does not allow (e.g. a finished model started again)."""


@dataclass(frozen=True)
class RewardModelRecord:
    id: str
    owner: str
    name: str
    trace_ids: tuple[str, ...]
    base_model: str
    epochs: int
    max_pairs: int
    status: str
    error: str | None
    metrics: dict[str, Any] | None
    checkpoint_uri: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    attempt: int = 1  # times queued: 1, and one more for each retry; names the run and its job
    run_id: str | None = None  # the orchestrator's run of the current attempt
    score_generation: int = 0  # "Score again" requests so far
    queued_at: datetime | None = None  # when the current attempt was queued
    score_requested_at: datetime | None = None  # when the latest Score again was asked
    partition_retired_at: datetime | None = None  # when its Dagster partition was deleted


def _record(row: sa.Row) -> RewardModelRecord:
    data = row._asdict()
    data["trace_ids"] = tuple(data["trace_ids"])
    return RewardModelRecord(**data)


def create_reward_model(connection: sa.Connection, owner: str, request: RewardModelRequest, *,
                        model_id: str | None = None) -> RewardModelRecord:
    """A queued model for a validated request, once its traces are known to be the owner's.

    An account that existed before the rollout has no reward models: NotFoundError (the API's 404).
    A trace that is missing or another account's is an InputError on ``trace_ids`` (the API's 422),
    naming the trace but not saying which of the two it is.
    """
    account = connection.execute(sa.select(schema.accounts.c.reward_models_enabled)
                                 .where(schema.accounts.c.id == owner)).one_or_none()
    if account is not None and not account.reward_models_enabled:
        raise NotFoundError("reward models are not available to this account")
    t = schema.traces
    owned: set[str] = set()
    for chunk in chunks(list(request.trace_ids)):
        owned.update(connection.scalars(
            sa.select(t.c.id).where(t.c.id.in_(chunk), t.c.owner == owner)))
    for index, trace_id in enumerate(request.trace_ids):
        if trace_id not in owned:
            raise InputError(f"no trace {trace_id} of yours", record="request",
                             field=f"trace_ids[{index}]")
    model_id = model_id or str(uuid.uuid4())
    connection.execute(rm.insert().values(id=model_id, owner=owner, status="queued", attempt=1,
                                          queued_at=schema.utcnow(), **request.to_dict()))
    return get_reward_model(connection, model_id)


def get_reward_model(connection: sa.Connection, model_id: str,
                     owner: str | None = None) -> RewardModelRecord:
    """NotFoundError when it does not exist or (owner given) belongs to someone else."""
    query = sa.select(rm).where(rm.c.id == model_id)
    if owner is not None:
        query = query.where(rm.c.owner == owner)
    row = connection.execute(query).one_or_none()
    if row is None:
        raise NotFoundError(f"no reward model {model_id}")
    return _record(row)


def list_reward_models(connection: sa.Connection, owner: str | None = None,
                       status: str | None = None) -> list[RewardModelRecord]:
    query = sa.select(rm).order_by(rm.c.created_at, rm.c.id)
    if owner is not None:
        query = query.where(rm.c.owner == owner)
    if status is not None:
        query = query.where(rm.c.status == status)
    return [_record(row) for row in connection.execute(query)]


def models_kept_current(connection: sa.Connection, per_owner: int) -> list[RewardModelRecord]:
    """The ``per_owner`` most recently succeeded models of each owner: the ones auto-scoring
    keeps current (``STASH_PERSONAL_SCORING_MODELS``), newest first within an owner."""
    ranked = (sa.select(rm.c.id, sa.func.row_number().over(
        partition_by=rm.c.owner, order_by=(rm.c.finished_at.desc(), rm.c.id.desc())).label("n"))
        .where(rm.c.status == "succeeded").subquery())
    query = (sa.select(rm).join(ranked, ranked.c.id == rm.c.id)
             .where(ranked.c.n <= per_owner)
             .order_by(rm.c.owner, rm.c.finished_at.desc(), rm.c.id.desc()))
    return [_record(row) for row in connection.execute(query)]


def _move(connection: sa.Connection, model_id: str, status: str, *,
          allowed: Sequence[str] | None = None, refusal: str | None = None,
          **values: Any) -> RewardModelRecord:
    """``allowed``: the statuses it may leave instead of ``_NEXT``'s (``resume`` alone), and
    ``refusal`` what the error says otherwise."""
    current = get_reward_model(connection, model_id)
    may = (status in _NEXT.get(current.status, ()) if allowed is None
           else current.status in allowed)
    if not may:
        raise StatusError(f"reward model {model_id} is {current.status}; "
                          f"{refusal or f'it cannot become {status}'}")
    # The status and attempt guard makes concurrent transitions safe: one racing update matches.
    result = connection.execute(
        rm.update().where(rm.c.id == model_id, rm.c.status == current.status,
                          rm.c.attempt == current.attempt).values(status=status, **values))
    if result.rowcount != 1:
        raise StatusError(f"reward model {model_id} changed status concurrently")
    return current


def mark_running(connection: sa.Connection, model_id: str, run_id: str | None = None) -> int:
    """Start the run of a queued model's attempt; returns the attempt number."""
    return _move(connection, model_id, "running", started_at=schema.utcnow(), run_id=run_id,
                 error=None, finished_at=None).attempt


def assign_run(connection: sa.Connection, model_id: str, run_id: str) -> None:
    """A queued model's attempt taken up by ``run_id``: it stays queued, waiting for the worker,
    until its training step holds the worker (``mark_running``)."""
    current = get_reward_model(connection, model_id)
    if current.status != "queued":
        raise StatusError(f"reward model {model_id} is {current.status}; only a queued model can "
                          "be taken up by a run")
    result = connection.execute(rm.update().where(
        rm.c.id == model_id, rm.c.status == "queued", rm.c.attempt == current.attempt)
        .values(run_id=run_id))
    if result.rowcount != 1:
        raise StatusError(f"reward model {model_id} changed status concurrently")


def resume(connection: sa.Connection, model_id: str, run_id: str) -> int:
    """A failed attempt runs on in ``run_id``, a re-execution of the run that failed it (Dagster's
    re-execute from failure beginning at the storing step): the same attempt, running again.
    Only this transition leads from failed back to running; returns the attempt number."""
    return _move(connection, model_id, "running", allowed=("failed",),
                 refusal="only a failed attempt can be resumed", run_id=run_id, error=None,
                 finished_at=None).attempt


def requeue(connection: sa.Connection, model_id: str) -> None:
    """A failed model goes back to the queue as a new attempt, which the sensor starts (adding
    its partition again when it was retired)."""
    _move(connection, model_id, "queued", attempt=rm.c.attempt + 1, error=None, finished_at=None,
          queued_at=schema.utcnow(), partition_retired_at=None, run_id=None)


def request_score_again(connection: sa.Connection, model_id: str) -> int:
    """Ask for a fresh scoring run of a succeeded model's checkpoint; returns the request number."""
    model = get_reward_model(connection, model_id)
    if model.status != "succeeded":
        raise StatusError(f"reward model {model_id} is {model.status}; only a succeeded model "
                          "has a checkpoint to score with")
    connection.execute(rm.update().where(rm.c.id == model_id)
                       .values(score_generation=rm.c.score_generation + 1,
                               score_requested_at=schema.utcnow()))
    return model.score_generation + 1


def replace_scores(connection: sa.Connection, model_id: str, *, scores: Sequence[TraceScore],
                   scored: dict[str, int], action_scores: Sequence[ActionScore] = ()) -> None:
    """A Score again run's results: the model's scores of these traces, replaced together."""
    if get_reward_model(connection, model_id).status != "succeeded":
        raise StatusError(f"reward model {model_id} is not succeeded; its scores cannot change")
    save_scores(connection, scores)
    if action_scores or scored:
        save_action_scores(connection, model_id, scored, action_scores)


def mark_succeeded(connection: sa.Connection, model_id: str, *, metrics: dict[str, Any],
                   checkpoint_uri: str, scored: dict[str, int] | None = None,
                   scores: Sequence[TraceScore] = (),
                   action_scores: Sequence[ActionScore] = (),
                   untrained: Sequence[TraceScore] = ()) -> None:
    """Metrics, checkpoint and scores (and the untrained base's, the trust report's baseline)
    land with the status change, in the caller's transaction."""
    model = _move(connection, model_id, "succeeded", metrics=metrics,
                  checkpoint_uri=checkpoint_uri, error=None, finished_at=schema.utcnow())
    save_scores(connection, scores)
    save_untrained_scores(connection, model_id, untrained)
    if action_scores or scored:
        save_action_scores(connection, model_id, scored or {}, action_scores)
    scoring_work.queue_model(connection, model_id, model.owner)


def mark_failed(connection: sa.Connection, model_id: str, error: str) -> None:
    """The one place a failed model's ``error`` is written: without absolute server paths, so the
    API, `rm show`, the viewer and the SQL endpoint's ``reward_models`` read none."""
    _move(connection, model_id, "failed", error=hide_server_paths(error)[-ERROR_TAIL_CHARS:],
          finished_at=schema.utcnow())


def queued_models(connection: sa.Connection, after: tuple[datetime, str] | None,
                  limit: int) -> list[RewardModelRecord]:
    """Models queued after ``after`` ((queued at, model id), the sensor's cursor) and queued
    still, oldest first, ``limit`` at most (through the index on status and queued_at)."""
    query = sa.select(rm).where(rm.c.status == "queued")
    if after is not None:
        query = query.where(sa.or_(rm.c.queued_at > after[0],
                                   sa.and_(rm.c.queued_at == after[0], rm.c.id > after[1])))
    return [_record(row) for row in connection.execute(
        query.order_by(rm.c.status, rm.c.queued_at, rm.c.id).limit(limit))]


def score_again_requested(connection: sa.Connection, after: tuple[datetime, str] | None,
                          limit: int) -> list[RewardModelRecord]:
    """Succeeded models whose latest Score again was asked after ``after`` ((asked at, model id),
    the sensor's cursor), oldest request first, ``limit`` at most."""
    query = sa.select(rm).where(rm.c.score_requested_at.is_not(None))
    if after is not None:
        query = query.where(sa.or_(rm.c.score_requested_at > after[0],
                                   sa.and_(rm.c.score_requested_at == after[0],
                                           rm.c.id > after[1])))
    query = query.order_by(rm.c.score_requested_at, rm.c.id).limit(limit)
    return [_record(row) for row in connection.execute(query)
            if row.status == "succeeded"]


def claim_partition_retirement(connection: sa.Connection, finished_before: datetime,
                               limit: int) -> list[RewardModelRecord]:
    """Stamp ``partition_retired_at`` on up to ``limit`` models whose partition no run needs any
    more (finished, succeeded or failed, before ``finished_before``, not retired yet), oldest
    first, read through the index on (partition_retired_at, finished_at, id); returns them.

    Their rows stay locked until the caller's transaction ends, so a retry of one of them (which
    needs its partition back) waits until the partitions' deletion has committed and then clears
    the stamp; a retry that committed first leaves its model out."""
    finished = ("succeeded", "failed")
    ids = list(connection.scalars(
        sa.select(rm.c.id).where(rm.c.partition_retired_at.is_(None),
                                 rm.c.finished_at < finished_before, rm.c.status.in_(finished))
        .order_by(rm.c.partition_retired_at, rm.c.finished_at, rm.c.id).limit(limit)))
    if not ids:
        return []
    claimed = [_record(row) for row in connection.execute(
        rm.update().where(rm.c.id.in_(ids), rm.c.partition_retired_at.is_(None),
                          rm.c.status.in_(finished))
        .values(partition_retired_at=schema.utcnow()).returning(*rm.c))]
    return sorted(claimed, key=lambda m: (m.finished_at, m.id))


def models_with_runs(connection: sa.Connection, after: tuple[datetime, str] | None,
                     limit: int) -> list[RewardModelRecord]:
    """Queued or running models whose attempt a run has taken up, queued after ``after``
    ((queued at, model id), a sensor's cursor), oldest first, ``limit`` at most (through the
    index on status and queued_at): the models whose run may have ended without them."""
    query = sa.select(rm).where(rm.c.status.in_(("queued", "running")),
                                rm.c.run_id.is_not(None))
    if after is not None:
        query = query.where(sa.or_(rm.c.queued_at > after[0],
                                   sa.and_(rm.c.queued_at == after[0], rm.c.id > after[1])))
    return [_record(row) for row in connection.execute(
        query.order_by(rm.c.queued_at, rm.c.id).limit(limit))]
