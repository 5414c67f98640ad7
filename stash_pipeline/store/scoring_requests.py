"""Score again for chosen traces: requests the scoring sensor turns into one run each, in id
order (`traces score`, POST /api/v1/traces/score)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.store import schema

r = schema.scoring_requests


@dataclass(frozen=True)
class ScoringRequest:
    id: int
    owner: str
    evaluator: str  # a release version or a personal model id
    traces: dict[str, int]  # {trace id: version when asked}
    actions: bool  # Score actions too
    created_at: datetime


def _request(row: sa.Row) -> ScoringRequest:
    data = row._asdict()
    data["traces"] = {str(k): int(v) for k, v in data["traces"].items()}
    return ScoringRequest(**data)


def request_scoring(connection: sa.Connection, *, owner: str, evaluator: str,
                    traces: Mapping[str, int], actions: bool) -> ScoringRequest:
    row = connection.execute(r.insert().values(owner=owner, evaluator=evaluator,
                                               traces=dict(traces), actions=actions)
                             .returning(*r.c)).one()
    return _request(row)


def scoring_requests(connection: sa.Connection, after: int = 0,
                     limit: int | None = None) -> list[ScoringRequest]:
    """The requests with an id above ``after`` (the sensor's cursor), oldest first, ``limit``
    at most."""
    return [_request(row) for row in connection.execute(
        sa.select(r).where(r.c.id > after).order_by(r.c.id).limit(limit))]


def get_scoring_request(connection: sa.Connection, request_id: int) -> ScoringRequest:
    row = connection.execute(sa.select(r).where(r.c.id == request_id)).one_or_none()
    if row is None:
        raise NotFoundError(f"no scoring request {request_id}")
    return _request(row)
