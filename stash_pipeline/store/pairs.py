"""Preference pairs with full provenance, kept per reward model or shared-evaluator candidate."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sqlalchemy as sa

from stash_pipeline.core.pairs import Pair
from stash_pipeline.store import schema
from stash_pipeline.store.batching import chunks

p = schema.pairs
# core.pairs.Pair.to_dict's keys are the table's columns, except the sides, stored as JSON.
_COLUMNS = ("id", "kind", "chosen", "rejected", "source_kind", "source_id", "source_trace_ids",
            "is_tool_call", "tool_name", "evidence_quote", "rationale", "slices", "generated")


def _owner_clause(reward_model_id: str | None, candidate: str | None) -> sa.ColumnElement[bool]:
    if (reward_model_id is None) == (candidate is None):
        raise ValueError("pairs belong to exactly one of reward_model_id or candidate")
    if reward_model_id is not None:
        return p.c.reward_model_id == reward_model_id
    return p.c.candidate == candidate


SPLITS = ("train", "eval", "excluded")
# A shared-evaluator candidate's benchmark pairs: stored with it, scored to gate its release, never
# trained on, and never part of its split.
BENCHMARK = "benchmark"


def _not_benchmark() -> sa.ColumnElement[bool]:
    return sa.or_(p.c.split.is_(None), p.c.split != BENCHMARK)


def save_pairs(connection: sa.Connection, pairs: Sequence[Pair], *,
               reward_model_id: str | None = None, candidate: str | None = None) -> int:
    """Replace the pairs of that model or candidate (not yet split), benchmark pairs included;
    their order is kept."""
    connection.execute(p.delete().where(_owner_clause(reward_model_id, candidate)))
    if pairs:
        connection.execute(p.insert(), [
            {**pair.to_dict(), "position": i, "reward_model_id": reward_model_id,
             "candidate": candidate}
            for i, pair in enumerate(pairs)
        ])
    return len(pairs)


def save_split(connection: sa.Connection, splits: Mapping[str, str], *,
               reward_model_id: str | None = None, candidate: str | None = None) -> None:
    """Label each stored pair (by pair id) train, eval or excluded; every pair must get a label."""
    owner = sa.and_(_owner_clause(reward_model_id, candidate), _not_benchmark())
    stored = set(connection.scalars(sa.select(p.c.id).where(owner)))
    if stored != set(splits) or not set(splits.values()) <= set(SPLITS):
        raise ValueError(f"a split labels every stored pair {SPLITS}: {len(stored)} stored, "
                         f"{len(splits)} labelled")
    for label in SPLITS:
        ids = sorted(pair_id for pair_id, value in splits.items() if value == label)
        for chunk in chunks(ids):
            connection.execute(p.update().where(owner, p.c.id.in_(chunk)).values(split=label))


def load_pairs(connection: sa.Connection, *, reward_model_id: str | None = None,
               candidate: str | None = None, split: str | None = None) -> list[Pair]:
    """The stored pairs in order; with ``split``, only those labelled so (``"benchmark"``: a
    candidate's benchmark pairs, which are left out otherwise)."""
    query = (sa.select(*(p.c[name] for name in _COLUMNS))
             .where(_owner_clause(reward_model_id, candidate)).order_by(p.c.position))
    query = query.where(_not_benchmark() if split is None else p.c.split == split)
    return [Pair.from_dict(row._asdict()) for row in connection.execute(query)]


def save_benchmark_pairs(connection: sa.Connection, pairs: Sequence[Pair], *,
                         candidate: str) -> int:
    """Replace a candidate's benchmark pairs (after ``save_pairs``, which clears them too)."""
    owner = _owner_clause(None, candidate)
    connection.execute(p.delete().where(owner, p.c.split == BENCHMARK))
    if pairs:
        connection.execute(p.insert(), [
            {**pair.to_dict(), "position": i, "reward_model_id": None, "candidate": candidate,
             "split": BENCHMARK}
            for i, pair in enumerate(pairs)
        ])
    return len(pairs)
