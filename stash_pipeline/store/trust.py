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
from stash_pipeline.core.trust_groups import DEFAULT_GROUPING, task_group
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


def trust_facts(connection: sa.Connection, owner: str, evaluator: str,
                group_by: str | None = None) -> TrustFacts:
    """Everything the report of ``evaluator`` on ``owner``'s traces reads; ``group_by`` names
    the metadata field whose value is a trace's task (``core.trust_groups``)."""
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
        sa.select(t.c.id, t.c.agent, t.c.domain, t.c.task_id, t.c.metadata, t.c.preview,
                  t.c.message_count).where(t.c.owner == owner))}
    kept = sorted(set(owned) - trained)
    whole = {row.trace_id: row for row in connection.execute(
        sa.select(s.c.trace_id, s.c.raw, s.c.calibrated, s.c.input_tokens)
        .join(t, sa.and_(t.c.id == s.c.trace_id, t.c.version == s.c.trace_version))
        .where(t.c.owner == owner, s.c.evaluator == evaluator))}
    u = schema.untrained_scores
    untrained = {row.trace_id: row.raw for row in connection.execute(
        sa.select(u.c.trace_id, u.c.raw)
        .join(t, sa.and_(t.c.id == u.c.trace_id, t.c.version == u.c.trace_version))
        .where(t.c.owner == owner, u.c.evaluator == evaluator))}
    # Action scores in aggregates (a trace has tens of actions): per trace its mean credit and
    # how many have a token count; all of them, their raw range; the cut ones, their lengths.
    scored = sa.select().select_from(a).join(
        t, sa.and_(t.c.id == a.c.trace_id, t.c.version == a.c.trace_version)).where(
        t.c.owner == owner, a.c.evaluator == evaluator)
    per_trace = {row.trace_id: row for row in connection.execute(scored.add_columns(
        a.c.trace_id, sa.func.avg(a.c.credit).label("mean_credit"),
        sa.func.count(a.c.input_tokens).label("counted")).group_by(a.c.trace_id))}
    low, high, count = connection.execute(scored.add_columns(
        sa.func.min(a.c.raw), sa.func.max(a.c.raw), sa.func.count())).one()
    window = metrics.get("max_length")
    cut = [] if window is None else [row.input_tokens for row in connection.execute(
        scored.add_columns(a.c.trace_id, a.c.input_tokens).where(a.c.input_tokens > window))
        if row.trace_id not in trained]
    tools = _tools(connection, owner)
    outcomes = _outcomes(connection, owner)
    ratings = _trace_ratings(connection, owner)

    def whole_of(trace_id: str, name: str) -> Any:
        return getattr(whole[trace_id], name) if trace_id in whole else None

    facts = [TraceFacts(
        id=trace_id, agent=owned[trace_id].agent, domain=owned[trace_id].domain,
        tools=tuple(sorted(tools.get(trace_id, ()))), succeeded=outcomes.get(trace_id),
        rating=_mean(ratings.get(trace_id)), score=whole_of(trace_id, "raw"),
        calibrated=whole_of(trace_id, "calibrated"),
        mean_credit=per_trace[trace_id].mean_credit if trace_id in per_trace else None,
        input_tokens=whole_of(trace_id, "input_tokens"),
        group=task_group(owned[trace_id], group_by), length=owned[trace_id].message_count,
        untrained=untrained.get(trace_id))
        for trace_id in kept]
    return TrustFacts(
        evaluator=evaluator, kind=kind, traces=facts,
        steps=[step for step in _steps(connection, owner, evaluator)
               if step.action_id.split("/", 1)[0] not in trained],
        held_out=held_out, held_out_source=source, held_out_unavailable=unavailable,
        trained_traces=len(set(owned) & trained), window=window,
        raw_scores=sorted(row.raw for row in whole.values()),
        action_raw_range=(low, high, count) if count else None,
        scored_actions=sum(row.counted for trace_id, row in per_trace.items()
                           if trace_id not in trained),
        cut_action_tokens=sorted(cut), training_pairs=metrics.get("num_pairs"),
        truncated_training_pairs=metrics.get("truncated_pairs"),
        trained_lengths=sorted((owned[trace_id].message_count, outcomes[trace_id])
                               for trace_id in set(owned) & trained if trace_id in outcomes),
        grouping=group_by or DEFAULT_GROUPING)


def _training_traces(connection: sa.Connection, model_id: str) -> set[str]:
    """The source traces of a personal model's training-split pairs."""
    rows = connection.scalars(sa.select(p.c.source_trace_ids).where(
        p.c.reward_model_id == model_id, p.c.split == "train"))
    return {trace_id for ids in rows for trace_id in ids}


def _tools(connection: sa.Connection, owner: str) -> dict[str, set[str]]:
    tools: dict[str, set[str]] = defaultdict(set)
    for row in connection.execute(sa.select(act.c.trace_id, act.c.tool_name).distinct().join(
            t, t.c.id == act.c.trace_id).where(t.c.owner == owner, act.c.tool_name.is_not(None))):
        tools[row.trace_id].add(row.tool_name)
    return tools


def _outcomes(connection: sa.Connection, owner: str) -> dict[str, bool]:
    """Each trace with verified outcomes: succeeded when every check did (reward >= 1), as the
    outcome pairs count it (``VerifiedOutcome.succeeded``)."""
    succeeded: dict[str, bool] = {}
    for row in connection.execute(sa.select(o.c.trace_id, o.c.reward).join(
            t, t.c.id == o.c.trace_id).where(t.c.owner == owner)):
        succeeded[row.trace_id] = succeeded.get(row.trace_id, True) and row.reward >= 1.0
    return succeeded


def _trace_ratings(connection: sa.Connection, owner: str) -> dict[str, list[float]]:
    ratings: dict[str, list[float]] = defaultdict(list)
    for row in connection.execute(sa.select(r.c.trace_id, r.c.value).join(
            t, t.c.id == r.c.trace_id).where(t.c.owner == owner, r.c.action_id.is_(None))):
        ratings[row.trace_id].append(row.value)
    return ratings


def _steps(connection: sa.Connection, owner: str, evaluator: str) -> list[StepFacts]:
    """Each rated action the evaluator credited, at the trace's current version: the mean of its
    step ratings, unless the action's content changed since (orphaned ratings count nowhere, as
    in pairs)."""
    query = (sa.select(r.c.action_id, r.c.value, act.c.tool_name, a.c.credit, t.c.agent,
                       t.c.domain)
             .join(t, t.c.id == r.c.trace_id)
             .join(act, sa.and_(act.c.id == r.c.action_id, act.c.trace_id == r.c.trace_id))
             .join(a, sa.and_(a.c.action_id == r.c.action_id, a.c.evaluator == evaluator,
                              a.c.trace_version == t.c.version))
             .where(t.c.owner == owner, a.c.credit.is_not(None),
                    sa.or_(r.c.action_digest.is_(None), act.c.content_digest.is_(None),
                           r.c.action_digest == act.c.content_digest)))
    rated: dict[str, list[Any]] = {}
    for row in connection.execute(query):
        rated.setdefault(row.action_id, [row, []])[1].append(row.value)
    return [StepFacts(action_id, _mean(values), row.credit, row.tool_name, row.agent,
                      row.domain)
            for action_id, (row, values) in sorted(rated.items())]


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
