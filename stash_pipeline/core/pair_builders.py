"""Deterministic pair builders (DESIGN §4): step ratings, trace ratings, reviewed comparisons and
verified outcomes. Extracted pairs (comments, corrections, assessment) come from ``extraction/``.

Builders read feedback only. Scores and action scores of any evaluator are not Feedback, and
``build_feedback_pairs`` rejects anything that is not, so no pair can be built from a prediction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import product
from statistics import fmean
from typing import Literal

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import (
    Comment,
    Feedback,
    Rating,
    ReviewedComparison,
    VerifiedOutcome,
    feedback_trace_ids,
    split_orphaned,
)
from stash_pipeline.core.pairs import Pair, PairSide, SourceKind, pair_id
from stash_pipeline.core.traces import Action, ToolCall, Trace, action_messages

Audience = Literal["personal", "shared"]
AUDIENCES: tuple[str, ...] = ("personal", "shared")
# The seed: opted-in traces contribute "corrections, step ratings and independently reviewed
# comparisons" to the shared evaluator, and nothing else (no comments, no automatic assessment, no
# trace ratings); verified outcomes and reviewed comparisons form its separate benchmark
# (core.shared_data). Personal models learn from every source.
AUDIENCE_SOURCES: dict[str, tuple[str, ...]] = {
    "personal": ("step_rating", "trace_rating", "comment", "correction", "assessment",
                 "reviewed_comparison", "verified_outcome"),
    "shared": ("step_rating", "correction", "reviewed_comparison"),
}
FEEDBACK_TYPES = (Comment, Rating, ReviewedComparison, VerifiedOutcome)


def audience_traces(traces: Iterable[Trace], audience: Audience) -> list[Trace]:
    """The traces an audience learns from: all selected ones; for shared, only opted-in ones."""
    if audience not in AUDIENCES:
        raise ValueError(f"unknown audience {audience!r}; expected one of {', '.join(AUDIENCES)}")
    return [t for t in traces if audience == "personal" or t.contribute]


def build_feedback_pairs(traces: Sequence[Trace], feedback: Iterable[Feedback],
                         audience: Audience = "personal") -> list[Pair]:
    """Every deterministic pair the feedback supports among ``traces``, sorted by pair id.

    Feedback that refers to a trace outside ``traces`` (not selected, or not opted in for the
    shared audience) yields no pair: only the selected traces supply training pairs. Nor does
    orphaned feedback (on an action a reimport removed; ``split_orphaned`` counts it). The shared
    audience takes only independently reviewed comparisons (the reviewer is not the author).
    """
    usable = {t.id: t for t in audience_traces(traces, audience)}
    feedback = list(feedback)
    for index, item in enumerate(feedback):
        if not isinstance(item, FEEDBACK_TYPES):
            # Scores and predictions are not labels (seed: never reused as training labels).
            raise TypeError(f"feedback[{index}] is a {type(item).__name__}, not feedback; "
                            "pairs are built from human feedback and verified outcomes only")
    by_type: dict[type, list] = defaultdict(list)
    for item in split_orphaned(usable.values(), feedback)[0]:
        if all(trace_id in usable for trace_id in feedback_trace_ids(item)):
            by_type[type(item)].append(item)
    ratings = by_type[Rating]
    pairs = [
        *step_rating_pairs(usable, [r for r in ratings if r.is_step_rating]),
        *trace_rating_pairs(usable, [r for r in ratings if not r.is_step_rating]),
        *reviewed_comparison_pairs(usable, [c for c in by_type[ReviewedComparison]
                                            if audience == "personal" or c.independently_reviewed]),
        *verified_outcome_pairs(usable, by_type[VerifiedOutcome]),
    ]
    allowed = AUDIENCE_SOURCES[audience]
    return sorted((p for p in pairs if p.source_kind in allowed), key=lambda p: p.id)


def step_rating_pairs(traces: Mapping[str, Trace], ratings: Iterable[Rating]) -> list[Pair]:
    """Within one trace, every higher-rated action is chosen over every lower-rated one.

    Several ratings of one action count as their mean; equal values give no pair.
    """
    by_action: dict[tuple[str, str], list[Rating]] = defaultdict(list)
    for rating in ratings:
        trace = traces[rating.trace_id]
        action = _action(trace, rating.action_id, f"rating {rating.id}")
        by_action[(trace.id, action.id)].append(rating)
    by_trace: dict[str, list[tuple[Action, float, str]]] = defaultdict(list)
    for (trace_id, action_id), group in sorted(by_action.items()):
        trace = traces[trace_id]
        source = ",".join(sorted(r.id for r in group))
        by_trace[trace_id].append((trace.action(action_id), fmean(r.value for r in group), source))
    pairs = []
    for trace_id, rated in sorted(by_trace.items()):
        trace = traces[trace_id]
        for (a, a_value, a_src), (b, b_value, b_src) in product(rated, rated):
            if a_value > b_value:
                pairs.append(_pair("step_rating", f"{a_src}>{b_src}",
                                   action_side(trace, a), action_side(trace, b)))
    return pairs


def trace_rating_pairs(traces: Mapping[str, Trace], ratings: Iterable[Rating]) -> list[Pair]:
    """Within one owner, among traces of one task (else one agent), the higher-rated one wins.

    A task is (domain, metadata.task_id): sources number their tasks per domain (tau2's airline
    and retail both have a task "12"), so the id alone would pair unrelated traces.
    """
    by_trace: dict[str, list[Rating]] = defaultdict(list)
    for rating in ratings:
        by_trace[rating.trace_id].append(rating)
    groups: dict[tuple, list[tuple[Trace, float, str]]] = defaultdict(list)
    for trace_id, group in sorted(by_trace.items()):
        trace = traces[trace_id]
        key = (("task", trace.domain or "", trace.task_id) if trace.task_id is not None
               else ("agent", trace.agent))
        source = ",".join(sorted(r.id for r in group))
        groups[(trace.owner, *key)].append((trace, fmean(r.value for r in group), source))
    return [
        _pair("trace_rating", f"{a_src}>{b_src}", PairSide(a), PairSide(b))
        for _, rated in sorted(groups.items(), key=lambda kv: repr(kv[0]))
        for (a, a_value, a_src), (b, b_value, b_src) in product(rated, rated)
        if a_value > b_value
    ]


def reviewed_comparison_pairs(traces: Mapping[str, Trace],
                              comparisons: Iterable[ReviewedComparison]) -> list[Pair]:
    """Approved comparisons as given: two actions, or two whole traces."""
    pairs = []
    for comparison in comparisons:
        if not comparison.usable:
            continue
        where = f"reviewed comparison {comparison.id}"
        chosen_trace = traces[comparison.chosen_trace_id]
        rejected_trace = traces[comparison.rejected_trace_id]
        if comparison.is_action_comparison:
            chosen = action_side(chosen_trace, _action(
                chosen_trace, comparison.chosen_action_id, where, "chosen_action_id"))
            rejected = action_side(rejected_trace, _action(
                rejected_trace, comparison.rejected_action_id, where, "rejected_action_id"))
        elif comparison.chosen_action_id or comparison.rejected_action_id:
            missing = "rejected_action_id" if comparison.chosen_action_id else "chosen_action_id"
            raise InputError("an action comparison needs both action ids", record=where,
                             field=missing)
        else:
            chosen, rejected = PairSide(chosen_trace), PairSide(rejected_trace)
        pairs.append(_pair("reviewed_comparison", comparison.id, chosen, rejected,
                           rationale=comparison.rationale))
    return pairs


def verified_outcome_pairs(traces: Mapping[str, Trace],
                           outcomes: Iterable[VerifiedOutcome]) -> list[Pair]:
    """Every succeeded trace over every failed trace of the same task (owner, domain, task_id).

    A trace with several outcomes counts as succeeded only when every check succeeded.
    """
    by_trace: dict[str, list[VerifiedOutcome]] = defaultdict(list)
    for outcome in outcomes:
        by_trace[outcome.trace_id].append(outcome)
    tasks: dict[tuple, tuple[list, list]] = defaultdict(lambda: ([], []))
    for trace_id, group in sorted(by_trace.items()):
        trace = traces[trace_id]
        if trace.task_id is None:
            continue
        succeeded = all(o.succeeded for o in group)
        source = ",".join(sorted(o.id for o in group))
        tasks[(trace.owner, trace.domain or "", trace.task_id)][0 if succeeded else 1].append(
            (trace, source))
    return [
        _pair("verified_outcome", f"{win_src}>{lose_src}", PairSide(win), PairSide(lose))
        for _, (wins, losses) in sorted(tasks.items())
        for (win, win_src), (lose, lose_src) in product(wins, losses)
    ]


def action_side(trace: Trace, action: Action) -> PairSide:
    """The trace cut right after the action: what a model reads to judge it."""
    return PairSide(trace.with_messages(action_messages(trace, action)), action.id)


def pair_slices(chosen: PairSide, rejected: PairSide) -> tuple[bool, str | None, dict]:
    """(is_tool_call, tool_name, slices) of a comparison.

    A comparison is a tool-call comparison when either side's action is a tool call; its tool slice
    is the tool name when the tool-call sides agree on one. Domain and agent slices are set when
    both sides share them (a cross-agent comparison belongs to no agent slice).
    """
    names = {call.name for side in (chosen, rejected) if (call := side_tool_call(side))}
    is_tool_call = bool(names)
    tool = next(iter(names)) if len(names) == 1 else None
    domain = chosen.trace.domain if chosen.trace.domain == rejected.trace.domain else None
    agent = chosen.trace.agent if chosen.trace.agent == rejected.trace.agent else None
    return is_tool_call, tool, {"tool": tool, "domain": domain, "agent": agent}


def side_tool_call(side: PairSide) -> ToolCall | None:
    """The tool call a side ends with, when its action is a tool call."""
    if side.action_id is None:
        return None
    action = side.trace.action(side.action_id)
    return side.trace.tool_call(action)


def side_tools(side: PairSide) -> set[str]:
    """The tools a side calls: its action's tool, or for a whole trace every tool it calls."""
    if side.action_id is not None:
        call = side_tool_call(side)
        return {call.name} if call else set()
    return {c.name for m in side.trace.messages if m.role == "assistant" for c in m.tool_calls}


def pair_tools(pair: Pair) -> tuple[str, ...]:
    """Every tool either side of a comparison calls, sorted: the tool slices it belongs to (one
    tool against another belongs to both; a tool against a text reply to the tool's)."""
    return tuple(sorted(side_tools(pair.chosen) | side_tools(pair.rejected)))


def side_key(side: PairSide) -> str:
    return side.action_id or side.trace.id


def _pair(source_kind: SourceKind, source_id: str, chosen: PairSide, rejected: PairSide, *,
          rationale: str | None = None) -> Pair:
    is_tool_call, tool, slices = pair_slices(chosen, rejected)
    kind = "action" if chosen.action_id and rejected.action_id else "trace"
    return Pair(
        id=pair_id(source_kind, source_id, side_key(chosen), side_key(rejected)),
        kind=kind, chosen=chosen, rejected=rejected, source_kind=source_kind,
        source_id=source_id,
        source_trace_ids=tuple(sorted({chosen.trace.id, rejected.trace.id})),
        is_tool_call=is_tool_call, tool_name=tool, rationale=rationale, slices=slices,
    )


def _action(trace: Trace, action_id: str | None, record: str, field: str = "action_id") -> Action:
    try:
        return trace.action(action_id or "")
    except KeyError:
        raise InputError(f"trace {trace.id} has no assistant action {action_id!r}",
                         record=record, field=field) from None
