"""The one train/eval split (seed "Training settings", "Metrics"), for personal and shared models.

Split by source trace: about 10% of the source traces held out (at least 1 when possible), seed 0.
Pairs whose source traces fall on both sides are excluded and counted. Traces linked by pairs (the
connected components of the pair graph: two traces of one task rated against each other, a
comparison, an outcome pair) are held out or kept together, so the held-out side has about 10% of
the pairs and almost none are lost to crossing. Only when the pairs link every trace into one
group is the group itself cut, trace by trace, as the seed's rule alone would. When no independent
split is usable, every pair trains and evaluation is unavailable (accuracy null downstream), with
the reason (``unavailable_reason``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stash_pipeline.core.errors import StashError
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.training_settings import HOLDOUT_FRACTION, MIN_PAIRS, SEED


class NotEnoughPairsError(StashError):
    """Fewer than two usable pairs: raised before any base model is downloaded."""

    def __init__(self, count: int, advice: str | None = None):
        self.count, self.advice = count, advice
        super().__init__(
            f"training needs at least {MIN_PAIRS} usable pairs, found {count}: " + (
                advice or "add ratings, comments or comparisons on the selected traces, or "
                "select more traces"))


@dataclass(frozen=True)
class PairSplit:
    train: tuple[Pair, ...]
    eval: tuple[Pair, ...]
    train_trace_ids: frozenset[str]
    eval_trace_ids: frozenset[str]
    excluded_cross_trace_pairs: int

    @property
    def eval_available(self) -> bool:
        return bool(self.eval)

    @property
    def eval_unavailable_reason(self) -> str | None:
        """Why there is no evaluation, and what would help; None when there is one."""
        return None if self.eval_available else unavailable_reason(self.train)

    def counts(self) -> dict[str, int | bool | str | None]:
        """The seed's count fields: overall, action comparisons and tool-call comparisons."""
        return {
            "num_pairs": len(self.train) + len(self.eval),
            "train_pairs": len(self.train),
            "eval_pairs": len(self.eval),
            "action_train_pairs": sum(p.kind == "action" for p in self.train),
            "action_eval_pairs": sum(p.kind == "action" for p in self.eval),
            "tool_train_pairs": sum(p.is_tool_call for p in self.train),
            "tool_eval_pairs": sum(p.is_tool_call for p in self.eval),
            "excluded_cross_trace_pairs": self.excluded_cross_trace_pairs,
            "train_traces": len(self.train_trace_ids),
            "eval_traces": len(self.eval_trace_ids),
            "eval_available": self.eval_available,
            "eval_unavailable_reason": self.eval_unavailable_reason,
        }


def held_out_count(trace_count: int, fraction: float = HOLDOUT_FRACTION) -> int:
    """10% of the traces, at least 1 when another trace is left to train on, else none."""
    if trace_count < 2:
        return 0
    return min(trace_count - 1, max(1, int(trace_count * fraction)))


def linked_groups(pairs: Sequence[Any]) -> list[tuple[str, ...]]:
    """The source traces, grouped by the pairs that link them (connected components of the pair
    graph): each group sorted, the groups in the order of their first trace id. ``pairs`` are
    anything with ``source_trace_ids``."""
    parent: dict[str, str] = {}

    def root(trace: str) -> str:
        parent.setdefault(trace, trace)
        while parent[trace] != trace:
            parent[trace] = parent[parent[trace]]
            trace = parent[trace]
        return trace

    for pair in pairs:
        first, *others = pair.source_trace_ids
        for other in others:
            a, b = root(first), root(other)
            if a != b:
                parent[max(a, b)] = min(a, b)
        root(first)
    groups: dict[str, list[str]] = {}
    for trace in sorted(parent):
        groups.setdefault(root(trace), []).append(trace)
    return sorted(tuple(group) for group in groups.values())


def held_out_traces(groups: Sequence[tuple[str, ...]], seed: int = SEED,
                    fraction: float = HOLDOUT_FRACTION) -> frozenset[str]:
    """The traces to hold out: whole groups, shuffled with ``seed``, taken while they fit in 10% of
    the traces (``held_out_count``). When no group fits, the smallest (first in that order) is held
    out, as long as another group is left to train on; a single group yields nothing."""
    if len(groups) < 2:
        return frozenset()
    shuffled = list(groups)
    random.Random(seed).shuffle(shuffled)
    target = held_out_count(sum(len(g) for g in groups), fraction)
    held: list[str] = []
    for group in shuffled:
        if len(held) + len(group) <= target:
            held.extend(group)
        if len(held) == target:
            break
    if not held:
        held.extend(min(shuffled, key=len))
    return frozenset(held)


def split_pairs(pairs: Sequence[Pair], seed: int = SEED,
                fraction: float = HOLDOUT_FRACTION) -> PairSplit:
    """Split ``pairs`` by source trace; raise NotEnoughPairsError under two pairs.

    Deterministic: the same pairs (in any order) and seed give the same split.
    """
    ordered = sorted(pairs, key=lambda p: p.id)
    if len(ordered) < MIN_PAIRS:
        raise NotEnoughPairsError(len(ordered))
    trace_ids = sorted({t for p in ordered for t in p.source_trace_ids})
    groups = linked_groups(ordered)
    held_out = held_out_traces(groups, seed, fraction)
    if not held_out:
        # One group: cut it trace by trace (the seed's rule); crossing pairs are excluded.
        shuffled = list(trace_ids)
        random.Random(seed).shuffle(shuffled)
        held_out = frozenset(shuffled[: held_out_count(len(trace_ids), fraction)])
    train, evaluation, crossing = [], [], 0
    for pair in ordered:
        sides = {t in held_out for t in pair.source_trace_ids}
        if sides == {True}:
            evaluation.append(pair)
        elif sides == {False}:
            train.append(pair)
        else:
            crossing += 1
    if not train or not evaluation:
        # No independent split: train on everything, report no evaluation.
        return PairSplit(tuple(ordered), (), frozenset(trace_ids), frozenset(), 0)
    return PairSplit(tuple(train), tuple(evaluation), frozenset(trace_ids) - held_out, held_out,
                     crossing)


def unavailable_reason(pairs: Sequence[Any]) -> str | None:
    """Why pairs that all train (no independent split) have no evaluation, and what would help;
    None when they do split. ``pairs`` are anything with ``source_trace_ids``."""
    groups = linked_groups(pairs)
    traces = sum(len(g) for g in groups)
    if traces < 2:
        return ("every pair comes from one trace, so no trace can be held out: add feedback on "
                "other traces to get a held-out evaluation")
    if len(groups) == 1:
        return (f"the pairs link all {traces} source traces into one group, so every way of "
                "holding traces out cuts pairs between them: add feedback within single traces "
                "(step ratings, comments) or on traces not compared with these")
    return None
