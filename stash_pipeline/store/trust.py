"""The facts a trust report reads (``core.trust``), gathered for one account and one evaluator,
and the report as last computed (``trust_reports``, and flat in ``trust_figures``).

Only the account's own traces count, at their current versions, and only those the evaluator did
not train on: a personal model's training-split source traces and a release's data snapshot
(the traces of every pair its candidate had) are left out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from stash_pipeline.core.trust import (
    BENCHMARK_SOURCE,
    SPLIT_SOURCE,
    StepFacts,
    TraceFacts,
    TrustFacts,
    held_out_from_benchmark,
    held_out_from_metrics,
)
from stash_pipeline.store import schema
from stash_pipeline.store.batching import chunks
from stash_pipeline.store.models import get_reward_model
from stash_pipeline.store.releases import get_release

t, s, a = schema.traces, schema.scores, schema.action_scores
act, o, r = schema.actions, schema.verified_outcomes, schema.ratings
tr, tf, p = schema.trust_reports, schema.trust_figures, schema.pairs


def evaluator_kind(connection: sa.Connection, evaluator: str) -> str:
    """"shared" for a release version, "personal" for a model id; NotFoundError for neither."""
    if connection.scalar(sa.select(sa.func.count()).select_from(schema.releases)
                         .where(schema.releases.c.version == evaluator)):
        return "shared"
    get_reward_model(connection, evaluator)  # NotFoundError when there is none
    return "personal"


def trust_facts(connection: sa.Connection, owner: str, evaluator: str) -> TrustFacts:
    """Everything the report of ``evaluator`` on ``owner``'s traces reads."""
    if evaluator_kind(connection, evaluator) == "shared":
        release = get_release(connection, evaluator)
        trained = set(release.data_snapshot.get("training_traces") or {})
        held_out = held_out_from_benchmark(release.benchmark_report)
        metrics = release.benchmark_report.get("candidate_metrics") or {}
        source, kind = BENCHMARK_SOURCE, "shared"
        unavailable = "the release's benchmark report has no pairs"
    else:
        model = get_reward_model(connection, evaluator)
        metrics = model.metrics or {}
        trained = _training_traces(connection, evaluator)
        held_out = held_out_from_metrics(metrics)
        source, kind = SPLIT_SOURCE, "personal"
        unavailable = metrics.get("eval_unavailable_reason") or "no usable independent split"
    owned = {row.id: row for row in connection.execute(
        sa.select(t.c.id, t.c.version, t.c.agent, t.c.domain).where(t.c.owner == owner))}
    tools = _tools(connection, owner)
    whole = {row.trace_id: row for row in connection.execute(
        sa.select(s.c.trace_id, s.c.raw, s.c.calibrated, s.c.input_tokens)
        .join(t, sa.and_(t.c.id == s.c.trace_id, t.c.version == s.c.trace_version))
        .where(t.c.owner == owner, s.c.evaluator == evaluator))}
    actions = list(connection.execute(
        sa.select(a.c.action_id, a.c.trace_id, a.c.raw, a.c.credit, a.c.input_tokens)
        .join(t, sa.and_(t.c.id == a.c.trace_id, t.c.version == a.c.trace_version))
        .where(t.c.owner == owner, a.c.evaluator == evaluator)))
    credits: dict[str, list[float]] = defaultdict(list)
    for row in actions:
        if row.credit is not None:
            credits[row.trace_id].append(row.credit)
    outcomes = _outcomes(connection, owner)
    trace_ratings, step_ratings = _ratings(connection, owner)
    kept = sorted(set(owned) - trained)
    facts = [TraceFacts(
        id=trace_id, agent=owned[trace_id].agent, domain=owned[trace_id].domain,
        tools=tuple(sorted(tools.get(trace_id, ()))), succeeded=outcomes.get(trace_id),
        rating=_mean(trace_ratings.get(trace_id)),
        score=whole[trace_id].raw if trace_id in whole else None,
        calibrated=whole[trace_id].calibrated if trace_id in whole else None,
        mean_credit=_mean(credits.get(trace_id)),
        input_tokens=whole[trace_id].input_tokens if trace_id in whole else None)
        for trace_id in kept]
    credit_of = {row.action_id: row.credit for row in actions if row.credit is not None}
    tool_of = _action_tools(connection, owner)
    steps = [StepFacts(action_id, _mean(values), credit_of[action_id], tool_of.get(action_id),
                       owned[trace_id].agent, owned[trace_id].domain)
             for (trace_id, action_id), values in sorted(step_ratings.items())
             if trace_id not in trained and action_id in credit_of]
    return TrustFacts(
        evaluator=evaluator, kind=kind, traces=facts, steps=steps, held_out=held_out,
        held_out_source=source, held_out_unavailable=unavailable,
        trained_traces=len(set(owned) & trained), window=metrics.get("max_length"),
        raw_scores=sorted(row.raw for row in whole.values()),
        raw_action_scores=sorted(row.raw for row in actions),
        action_input_tokens=[row.input_tokens for row in actions
                             if row.input_tokens is not None and row.trace_id not in trained],
        training_pairs=metrics.get("num_pairs"),
        truncated_training_pairs=metrics.get("truncated_pairs"))


def _training_traces(connection: sa.Connection, model_id: str) -> set[str]:
    """The source traces of a personal model's training-split pairs."""
    rows = connection.scalars(sa.select(p.c.source_trace_ids).where(
        p.c.reward_model_id == model_id, p.c.split == "train"))
    return {trace_id for ids in rows for trace_id in ids}


def _tools(connection: sa.Connection, owner: str) -> dict[str, set[str]]:
    tools: dict[str, set[str]] = defaultdict(set)
    for row in connection.execute(sa.select(act.c.trace_id, act.c.tool_name).join(
            t, t.c.id == act.c.trace_id).where(t.c.owner == owner, act.c.tool_name.is_not(None))):
        tools[row.trace_id].add(row.tool_name)
    return tools


def _action_tools(connection: sa.Connection, owner: str) -> dict[str, str]:
    return {row.id: row.tool_name for row in connection.execute(
        sa.select(act.c.id, act.c.tool_name).join(t, t.c.id == act.c.trace_id)
        .where(t.c.owner == owner, act.c.tool_name.is_not(None)))}


def _outcomes(connection: sa.Connection, owner: str) -> dict[str, bool]:
    """Each trace with verified outcomes: succeeded when every check did (reward >= 1), as the
    outcome pairs count it (``VerifiedOutcome.succeeded``)."""
    succeeded: dict[str, bool] = {}
    for row in connection.execute(sa.select(o.c.trace_id, o.c.reward).join(
            t, t.c.id == o.c.trace_id).where(t.c.owner == owner)):
        succeeded[row.trace_id] = succeeded.get(row.trace_id, True) and row.reward >= 1.0
    return succeeded


def _ratings(connection: sa.Connection, owner: str
             ) -> tuple[dict[str, list[float]], dict[tuple[str, str], list[float]]]:
    """Trace ratings by trace, and step ratings by (trace, action) on actions that still hold the
    content they were given on (orphaned ratings count nowhere, as in pairs)."""
    trace_ratings: dict[str, list[float]] = defaultdict(list)
    step_ratings: dict[tuple[str, str], list[float]] = defaultdict(list)
    query = (sa.select(r.c.trace_id, r.c.action_id, r.c.value, r.c.action_digest,
                       act.c.id.label("exists"), act.c.content_digest)
             .join(t, t.c.id == r.c.trace_id)
             .outerjoin(act, sa.and_(act.c.id == r.c.action_id, act.c.trace_id == r.c.trace_id))
             .where(t.c.owner == owner))
    for row in connection.execute(query):
        if row.action_id is None:
            trace_ratings[row.trace_id].append(row.value)
        elif row.exists is not None and (row.action_digest is None or row.content_digest is None
                                         or row.action_digest == row.content_digest):
            step_ratings[(row.trace_id, row.action_id)].append(row.value)
    return trace_ratings, step_ratings


def _mean(values: list[float] | None) -> float | None:
    return sum(values) / len(values) if values else None


# The stored report ---------------------------------------------------------------------------

def stored_report(connection: sa.Connection, owner: str, evaluator: str
                  ) -> tuple[dict[str, Any], str, datetime] | None:
    """(report, inputs digest, computed at) as last saved, or None."""
    row = connection.execute(sa.select(tr.c.report, tr.c.inputs_digest, tr.c.computed_at).where(
        tr.c.owner == owner, tr.c.evaluator == evaluator)).one_or_none()
    if row is None:
        return None
    at = row.computed_at  # SQLite gives it back without its zone, which is UTC (schema.utcnow)
    return row.report, row.inputs_digest, at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def save_report(connection: sa.Connection, owner: str, evaluator: str, report: dict[str, Any],
                digest: str, computed_at: datetime) -> None:
    """Replace the account's report of the evaluator, whole and as flat figures."""
    for table in (tr, tf):
        connection.execute(table.delete().where(table.c.owner == owner,
                                                table.c.evaluator == evaluator))
    connection.execute(tr.insert().values(owner=owner, evaluator=evaluator, kind=report["kind"],
                                          report=report, inputs_digest=digest,
                                          computed_at=computed_at))
    rows = [{"owner": owner, "evaluator": evaluator, "kind": report["kind"],
             "metric": f["metric"], "slice_kind": f["slice_kind"], "slice": f["slice"],
             "value": f["value"], "low": f["low"], "high": f["high"], "n": f["n"],
             "detail": f["detail"], "computed_at": computed_at}
            for f in report["figures"]]
    if rows:
        connection.execute(tf.insert(), rows)


def report_owners(connection: sa.Connection, evaluator: str) -> list[str]:
    """Accounts with a stored report of this evaluator (refreshed when it scores again)."""
    return list(connection.scalars(sa.select(tr.c.owner).where(tr.c.evaluator == evaluator)
                                   .order_by(tr.c.owner)))


def owners_of(connection: sa.Connection, trace_ids: Iterable[str]) -> list[str]:
    """The owners of these traces (a scoring run's): whose reports the run changes."""
    owners: set[str] = set()
    for chunk in chunks(sorted(set(trace_ids))):
        owners.update(connection.scalars(sa.select(t.c.owner).where(t.c.id.in_(chunk))))
    return sorted(owners)
