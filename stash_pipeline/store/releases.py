"""Shared-evaluator releases and the benchmark comparisons that gate them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.store import schema, scoring_work

r, bc = schema.releases, schema.benchmark_comparisons
# The columns a Release holds (the queueing's columns are store.scoring_work's).
RELEASE_COLUMNS = (r.c.version, r.c.checkpoint_uri, r.c.benchmark_report, r.c.data_snapshot,
                   r.c.created_at)


@dataclass(frozen=True)
class Release:
    version: str  # also the evaluator tag of its scores
    checkpoint_uri: str
    benchmark_report: dict[str, Any]
    data_snapshot: dict[str, Any]  # trace ids and versions it was trained on
    created_at: datetime | None = None


@dataclass(frozen=True)
class BenchmarkComparison:
    id: int
    candidate: str
    incumbent: str | None
    passed: bool
    report: dict[str, Any]
    created_at: datetime


def save_release(connection: sa.Connection, release: Release) -> Release:
    """The new incumbent; every trace is to be queued for it to score, in batches after this
    transaction (``Store.save_release``, store.scoring_work.settle_release_queue)."""
    replaced = latest_release(connection)
    connection.execute(r.insert().values(
        version=release.version, checkpoint_uri=release.checkpoint_uri,
        benchmark_report=release.benchmark_report, data_snapshot=release.data_snapshot))
    saved = get_release(connection, release.version)
    if latest_release(connection) == saved:
        scoring_work.open_release_queue(connection, saved.version,
                                        replaced.version if replaced else None)
    return saved


def get_release(connection: sa.Connection, version: str) -> Release:
    row = connection.execute(sa.select(*RELEASE_COLUMNS)
                             .where(r.c.version == version)).one_or_none()
    if row is None:
        raise NotFoundError(f"no release {version}")
    return Release(**row._asdict())


def latest_release(connection: sa.Connection) -> Release | None:
    """The incumbent shared evaluator; None until the first release (traces wait for it)."""
    row = connection.execute(sa.select(*RELEASE_COLUMNS).order_by(
        r.c.created_at.desc(), r.c.version.desc()).limit(1)).one_or_none()
    return None if row is None else Release(**row._asdict())


def list_releases(connection: sa.Connection) -> list[Release]:
    rows = connection.execute(sa.select(*RELEASE_COLUMNS).order_by(r.c.created_at, r.c.version))
    return [Release(**row._asdict()) for row in rows]


def save_benchmark_comparison(connection: sa.Connection, *, candidate: str,
                              incumbent: str | None, passed: bool,
                              report: dict[str, Any]) -> BenchmarkComparison:
    comparison_id = connection.execute(
        bc.insert().values(candidate=candidate, incumbent=incumbent, passed=passed, report=report)
        .returning(bc.c.id)).scalar_one()
    row = connection.execute(sa.select(bc).where(bc.c.id == comparison_id)).one()
    return BenchmarkComparison(**row._asdict())


def list_benchmark_comparisons(connection: sa.Connection,
                               candidate: str | None = None) -> list[BenchmarkComparison]:
    query = sa.select(bc).order_by(bc.c.id)
    if candidate is not None:
        query = query.where(bc.c.candidate == candidate)
    return [BenchmarkComparison(**row._asdict()) for row in connection.execute(query)]
