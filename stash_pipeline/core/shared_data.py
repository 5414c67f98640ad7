"""The shared evaluator's data (seed, "The shared evaluator"): opted-in traces only, split by role
into training traces and benchmark traces, so no source trace is ever in both.

Training learns from step ratings, corrections and independently reviewed comparisons
(``AUDIENCE_SOURCES["shared"]``); the benchmark holds human-reviewed comparisons and
verified-outcome comparisons. Roles are decided per group of traces that share a task (domain and
``metadata.task_id``; a trace without a task is its own group), so the traces of one task never
straddle training and benchmark:

- a group with a verified outcome is benchmark (outcomes only ever benchmark);
- a group with independently reviewed comparisons is benchmark when its key's stable hash falls in
  ``BENCHMARK_SHARE``: the same group stays on the same side week after week;
- a group the incumbent release trained on stays training, so the benchmark never favours it;
- every other group trains.

A comparison between a training trace and a benchmark trace belongs to neither and is counted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stash_pipeline.core.feedback import (
    Feedback,
    ReviewedComparison,
    VerifiedOutcome,
    split_orphaned,
)
from stash_pipeline.core.pair_builders import audience_traces, build_feedback_pairs
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.traces import Trace
from stash_pipeline.core.training_settings import BENCHMARK_SHARE

BENCHMARK_SOURCES: tuple[str, ...] = ("reviewed_comparison", "verified_outcome")


class OverlapError(AssertionError):
    """A source trace in both the training and the benchmark pairs: never released from."""


@dataclass(frozen=True)
class SharedRoles:
    training: tuple[Trace, ...]
    benchmark: tuple[Trace, ...]
    # Groups that would be benchmark but the incumbent trained on them: kept in training.
    kept_for_training: frozenset[str] = field(default_factory=frozenset)

    def counts(self) -> dict[str, int]:
        return {"training_traces": len(self.training), "benchmark_traces": len(self.benchmark),
                "kept_out_of_benchmark": len(self.kept_for_training)}


def group_key(trace: Trace) -> str:
    """The traces of one task share a role: a task is (domain, task id), as for outcomes."""
    if trace.task_id is not None:
        return f"task:{trace.domain or ''}:{trace.task_id}"
    return f"trace:{trace.id}"


def in_benchmark_share(key: str, share: float = BENCHMARK_SHARE) -> bool:
    """Whether a group's stable hash falls in the benchmark's share (independent of any order)."""
    digest = hashlib.sha256(f"stash-benchmark|{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def assign_roles(traces: Iterable[Trace], feedback: Sequence[Feedback], *,
                 trained_before: Iterable[str] = ()) -> SharedRoles:
    """Split the opted-in ``traces`` into training and benchmark traces (see the module's rules).

    ``trained_before``: trace ids the incumbent release trained on (its data snapshot).
    """
    opted_in = sorted(audience_traces(traces, "shared"), key=lambda t: t.id)
    feedback = split_orphaned(opted_in, feedback)[0]  # orphaned feedback makes no pair anywhere
    with_outcome = {f.trace_id for f in feedback if isinstance(f, VerifiedOutcome)}
    reviewed = {trace_id for f in feedback
                if isinstance(f, ReviewedComparison) and f.independently_reviewed
                for trace_id in (f.chosen_trace_id, f.rejected_trace_id)}
    trained = set(trained_before)
    groups: dict[str, list[Trace]] = {}
    for trace in opted_in:
        groups.setdefault(group_key(trace), []).append(trace)
    training: list[Trace] = []
    benchmark: list[Trace] = []
    kept: set[str] = set()
    for key, members in sorted(groups.items()):
        ids = {t.id for t in members}
        wanted = bool(ids & with_outcome) or bool(ids & reviewed) and in_benchmark_share(key)
        if wanted and ids & trained:
            kept.add(key)
            wanted = False
        (benchmark if wanted else training).extend(members)
    return SharedRoles(tuple(training), tuple(benchmark), frozenset(kept))


def benchmark_pairs(traces: Sequence[Trace], feedback: Iterable[Feedback]) -> list[Pair]:
    """The benchmark's pairs among ``traces``: independently reviewed comparisons and verified
    outcomes whose traces are all benchmark traces, sorted by pair id. Orphaned feedback (on an
    action a reimport removed) yields no pair, as in training."""
    labels = [f for f in feedback if isinstance(f, VerifiedOutcome)
              or isinstance(f, ReviewedComparison) and f.independently_reviewed]
    # The personal audience's rules keep both kinds; the traces are opted in already.
    return build_feedback_pairs(traces, labels, "personal")


def crossing_comparisons(roles: SharedRoles, feedback: Iterable[Feedback]) -> int:
    """Reviewed comparisons with one side in training and the other in the benchmark: unused."""
    training = {t.id for t in roles.training}
    benchmark = {t.id for t in roles.benchmark}
    return sum(1 for f in feedback if isinstance(f, ReviewedComparison)
               and f.independently_reviewed
               and {f.chosen_trace_id, f.rejected_trace_id} & training
               and {f.chosen_trace_id, f.rejected_trace_id} & benchmark)


def check_disjoint(training: Iterable[Pair], benchmark: Iterable[Pair]) -> dict[str, Any]:
    """The check the release relies on: no source trace in both; OverlapError names them."""
    trained = {t for p in training for t in p.source_trace_ids}
    benchmarked = {t for p in benchmark for t in p.source_trace_ids}
    both = sorted(trained & benchmarked)
    if both:
        raise OverlapError(f"{len(both)} source trace(s) in both training and benchmark pairs: "
                           f"{', '.join(both[:5])}")
    return {"training_source_traces": len(trained), "benchmark_source_traces": len(benchmarked),
            "traces_in_both": 0}


def not_trainable_advice(benchmark: Sequence[Pair]) -> str:
    """Why the shared evaluator has too few training pairs, and what would help: it learns from
    step ratings, corrections and independently reviewed comparisons only, and not on the
    benchmark's task groups (verified outcomes only ever benchmark)."""
    outcomes = sum(p.source_kind == "verified_outcome" for p in benchmark)
    reviewed = sum(p.source_kind == "reviewed_comparison" for p in benchmark)
    groups = sorted({group_key(side.trace) for p in benchmark for side in (p.chosen, p.rejected)})
    held = []
    if outcomes:
        held.append(f"{outcomes} verified-outcome pair(s) are benchmark-only (the seed's rule)")
    if reviewed:
        held.append(f"{reviewed} reviewed-comparison pair(s) are in the benchmark")
    where = (f"outside the benchmark's {len(groups)} task group(s) ("
             + ", ".join(groups[:3]) + (", ..." if len(groups) > 3 else "") + ")") if groups else ""
    return ((("; ".join(held) + ". ") if held else "")
            + "The shared evaluator trains on step ratings, corrections and independently "
            "reviewed comparisons of opted-in traces: add those on opted-in traces"
            + (f" {where}" if where else "") + ", or opt more traces in")
