"""Reward models and their status: queued -> running -> succeeded | failed."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from stash_pipeline.core.errors import NotFoundError, StashError
from stash_pipeline.core.training_settings import (
    DEFAULT_BASE_MODEL, DEFAULT_EPOCHS, DEFAULT_MAX_PAIRS, ERROR_TAIL_CHARS,
)
from stash_pipeline.store import schema
from stash_pipeline.store.accounts import ensure_accounts
from stash_pipeline.store.scores import ActionScore, TraceScore, save_action_scores, save_scores

STATUSES = ("queued", "running", "succeeded", "failed")
# Extraction and the pair count are checked after queueing, so a queued job may fail directly.
_NEXT = {"queued": {"running", "failed"}, "running": {"succeeded", "failed"}}

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


def _record(row: sa.Row) -> RewardModelRecord:
    data = row._asdict()
    data["trace_ids"] = tuple(data["trace_ids"])
    return RewardModelRecord(**data)


def create_reward_model(connection: sa.Connection, *, owner: str, name: str,
                        trace_ids: Sequence[str], base_model: str = DEFAULT_BASE_MODEL,
                        epochs: int = DEFAULT_EPOCHS, max_pairs: int = DEFAULT_MAX_PAIRS,
                        model_id: str | None = None) -> RewardModelRecord:
    """A queued model. Checking the request (trace ownership, field values) is the caller's."""
    ensure_accounts(connection, [owner])
    model_id = model_id or str(uuid.uuid4())
    connection.execute(rm.insert().values(
        id=model_id, owner=owner, name=name, trace_ids=list(trace_ids), base_model=base_model,
        epochs=epochs, max_pairs=max_pairs, status="queued"))
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


def _move(connection: sa.Connection, model_id: str, status: str, **values: Any) -> None:
    current = get_reward_model(connection, model_id).status
    if status not in _NEXT.get(current, ()):
        raise StatusError(f"reward model {model_id} is {current}; it cannot become {status}")
    # The status guard makes concurrent transitions safe: only one of two racing updates matches.
    result = connection.execute(rm.update().where(rm.c.id == model_id, rm.c.status == current)
                                .values(status=status, **values))
    if result.rowcount != 1:
        raise StatusError(f"reward model {model_id} changed status concurrently")


def mark_running(connection: sa.Connection, model_id: str) -> None:
    _move(connection, model_id, "running", started_at=schema.utcnow())


def mark_succeeded(connection: sa.Connection, model_id: str, *, metrics: dict[str, Any],
                   checkpoint_uri: str, scored: dict[str, int] | None = None,
                   scores: Sequence[TraceScore] = (),
                   action_scores: Sequence[ActionScore] = ()) -> None:
    """Metrics, checkpoint and scores land with the status change, in the caller's transaction."""
    _move(connection, model_id, "succeeded", metrics=metrics, checkpoint_uri=checkpoint_uri,
          error=None, finished_at=schema.utcnow())
    save_scores(connection, scores)
    if action_scores or scored:
        save_action_scores(connection, model_id, scored or {}, action_scores)


def mark_failed(connection: sa.Connection, model_id: str, error: str) -> None:
    _move(connection, model_id, "failed", error=error[-ERROR_TAIL_CHARS:],
          finished_at=schema.utcnow())
