"""max_pairs: one cap on API-rating plus feedback-derived pairs together, by a seeded sample."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.training_settings import DEFAULT_MAX_PAIRS, SEED


@dataclass(frozen=True)
class CappedPairs:
    pairs: tuple[Pair, ...]
    dropped: int


def cap_pairs(pairs: Sequence[Pair], max_pairs: int = DEFAULT_MAX_PAIRS,
              seed: int = SEED) -> CappedPairs:
    """At most ``max_pairs`` pairs, sorted by id; the same input in any order keeps the same."""
    if isinstance(max_pairs, bool) or not isinstance(max_pairs, int) or max_pairs < 1:
        raise ValueError(f"max_pairs must be a positive integer, got {max_pairs!r}")
    # Sorting first makes the sample independent of the order the store or builders returned.
    ordered = sorted(pairs, key=lambda p: p.id)
    if len(ordered) <= max_pairs:
        return CappedPairs(tuple(ordered), 0)
    kept = random.Random(seed).sample(ordered, max_pairs)
    return CappedPairs(tuple(sorted(kept, key=lambda p: p.id)), len(ordered) - max_pairs)
