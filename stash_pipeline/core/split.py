"""The one train/eval split (seed "Training settings", "Metrics"), for personal and shared models.

Split by source trace: 10% of the source traces held out (at least 1 when possible), seed 0.
Pairs whose source traces fall on both sides are excluded and counted. When no independent split
is usable, every pair trains and evaluation is unavailable (accuracy null downstream).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from stash_pipeline.core.errors import StashError
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.training_settings import HOLDOUT_FRACTION, MIN_PAIRS, SEED



class NotEnoughPairsError(StashError):
    """Fewer than two usable pairs: raised before any base model is downloaded."""

    def __init__(self, count: int):
        self.count = count
        super().__init__(
            f"training needs at least {MIN_PAIRS} usable pairs, found {count}: add ratings, "
            "comments or comparisons on the selected traces, or select more traces")


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

    def counts(self) -> dict[str, int | bool]:
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
        }


def held_out_count(trace_count: int, fraction: float = HOLDOUT_FRACTION) -> int:
    """10% of the traces, at least 1 when another trace is left to train on, else none."""
    if trace_count < 2:
        return 0
    return min(trace_count - 1, max(1, int(trace_count * fraction)))


def split_pairs(pairs: Sequence[Pair], seed: int = SEED,
                fraction: float = HOLDOUT_FRACTION) -> PairSplit:
    """Split ``pairs`` by source trace; raise NotEnoughPairsError under two pairs.

    Deterministic: the same pairs (in any order) and seed give the same split.
    """
    ordered = sorted(pairs, key=lambda p: p.id)
    if len(ordered) < MIN_PAIRS:
        raise NotEnoughPairsError(len(ordered))
    trace_ids = sorted({t for p in ordered for t in p.source_trace_ids})
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
