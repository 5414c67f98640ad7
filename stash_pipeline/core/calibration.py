"""From raw rewards to the numbers people read: action credit and the calibrated score (DESIGN §6).

A raw reward has no fixed scale (Bradley-Terry only learns gaps), so both formulas measure it
against statistics of the same model's rewards on its own training pairs: ``reward_stats.json``
(whole-trace comparisons) and ``action_reward_stats.json`` (action comparisons). Held-out pairs
never set them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.training_settings import DISPLAY_SCALE_PAIRS, SEED

# A logistic of more than this many standard deviations rounds to exactly 0 or 1 in float64; the
# calibrated score is promised to lie strictly between them, so the argument stops here.
_MAX_LOGISTIC_ARGUMENT = 30.0


@dataclass(frozen=True)
class RewardStats:
    """Mean and (population) standard deviation of a model's rewards on its training texts."""

    mean: float
    std: float
    count: int | None = None  # how many rewards they summarise, when known

    @property
    def scale(self) -> float:
        """The divisor for standardising: std, or 1.0 when std is 0.

        std is 0 when every training reward was equal (one pair scored the same on both sides, or
        an untrained head). The midpoint is still meaningful but the spread is not; falling back to
        the raw reward's own unit keeps both formulas finite and order-preserving.
        """
        return self.std if self.std > 0 else 1.0

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"mean": self.mean, "std": self.std}
        if self.count is not None:
            data["count"] = self.count
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str | None = None) -> RewardStats:
        """Read the JSON form; an error names the file and the field that is wrong."""
        if not isinstance(data, Mapping):
            raise InputError("expected a JSON object with 'mean' and 'std'", file=file)
        values: dict[str, float] = {}
        for name in ("mean", "std"):
            value = data.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(f"expected a number, got {value!r}", file=file, field=name)
            if not math.isfinite(value):
                raise InputError(f"expected a finite number, got {value!r}", file=file, field=name)
            values[name] = float(value)
        if values["std"] < 0:
            raise InputError(f"a standard deviation cannot be negative: {values['std']}",
                             file=file, field="std")
        count = data.get("count")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                                  or count < 0):
            raise InputError(f"expected a non-negative integer, got {count!r}", file=file,
                             field="count")
        return cls(values["mean"], values["std"], count)


def reward_stats(rewards: Iterable[float]) -> RewardStats:
    """The stats of these rewards: both sides of training pairs (``display_scale_sample``), never
    held-out."""
    values = [float(r) for r in rewards]
    if not values:
        raise ValueError("reward statistics need at least one reward")
    for index, value in enumerate(values):
        if not math.isfinite(value):
            raise ValueError(f"reward {index} is not finite: {value}")
    mean = math.fsum(values) / len(values)
    variance = math.fsum((v - mean) ** 2 for v in values) / len(values)
    return RewardStats(mean=mean, std=math.sqrt(variance), count=len(values))


def display_scale_sample(kinds: Sequence[str], limit: int = DISPLAY_SCALE_PAIRS, seed: int = SEED
                         ) -> tuple[list[int], list[int]]:
    """Which training pairs set the display scale: (indices for ``reward_stats.json``, indices of
    action pairs for ``action_reward_stats.json``), given each training pair's kind.

    All of them up to ``limit`` each, else a seeded sample of ``limit``: the stats are the mean and
    spread of the training rewards (seed, GEPA), and 2 x 256 rewards estimate them to about 4% of a
    standard deviation, while forwarding every side of 4000 pairs again would cost a third of an
    epoch's training (docs/worker.md, "Evaluation plus scoring").
    """
    def sample(indices: list[int]) -> list[int]:
        if len(indices) <= limit:
            return indices
        return sorted(random.Random(seed).sample(indices, limit))

    return (sample(list(range(len(kinds)))),
            sample([index for index, kind in enumerate(kinds) if kind == "action"]))


def action_credit(raw: float, stats: RewardStats) -> float:
    """``tanh((raw - action_training_mean) / (2 * action_training_std))``: -1..+1, 0 at the mean."""
    return math.tanh((raw - stats.mean) / (2.0 * stats.scale))


def calibrated_score(raw: float, stats: RewardStats) -> float:
    """A logistic of ``(raw - mean) / std``: strictly between 0 and 1, exactly 0.5 at the mean.

    Not a probability of correctness: a position relative to the model's own training rewards.
    """
    z = (raw - stats.mean) / stats.scale
    z = max(-_MAX_LOGISTIC_ARGUMENT, min(_MAX_LOGISTIC_ARGUMENT, z))
    # Written so that exp never overflows and both tails keep their precision.
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)
