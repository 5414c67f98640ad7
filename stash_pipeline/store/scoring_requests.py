"""Score again for chosen traces: requests the scoring sensor turns into one run each, oldest
first (`traces score`, POST /api/v1/traces/score). Ids are random UUIDs (core.record_ids); a
request made before 0012 is named by its integer id too."""

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
    id: str  # a UUID
    legacy_id: int | None  # its integer id, for a request made before 0012
    owner: str
    evaluator: str  # a release version or a personal model id
    traces: dict[str, int]  # {trace id: version when asked}
    actions: bool  # Score actions too
    created_at: datetime

    @property
    def run_ref(self) -> str:
        """What its run's key and tag carry: the integer id of a request made before 0012 (a run
        asked for then carries it, and the sensor must find it), else its id."""
        return str(self.legacy_id) if self.legacy_id is not None else self.id


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


def scoring_requests(connection: sa.Connection,
                     after: tuple[datetime, str] | int | None = None,
                     limit: int | None = None) -> list[ScoringRequest]:
    """The requests past ``after`` (the sensor's cursor: (created at, id)), oldest first,
    ``limit`` at most. An integer ``after`` is a cursor kept from before 0012, a request id: the
    requests with a greater integer id or none (made since)."""
    query = sa.select(r)
    if isinstance(after, int):
        query = query.where(sa.or_(r.c.legacy_id > after, r.c.legacy_id.is_(None)))
    elif after is not None:
        query = query.where(sa.or_(r.c.created_at > after[0],
                                   sa.and_(r.c.created_at == after[0], r.c.id > after[1])))
    return [_request(row) for row in connection.execute(
        query.order_by(r.c.created_at, r.c.id).limit(limit))]


def get_scoring_request(connection: sa.Connection, request_id: str | int) -> ScoringRequest:
    """The request of this id: its UUID, or its integer id before 0012 (core.record_ids)."""
    key = r.c.legacy_id if isinstance(request_id, int) else r.c.id
    row = connection.execute(sa.select(r).where(key == request_id)).one_or_none()
    if row is None:
        raise NotFoundError(f"no scoring request {request_id}")
    return _request(row)
