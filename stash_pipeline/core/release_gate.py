"""The shared evaluator's release gate (seed: "Candidates must beat the incumbent overall without
regressions on sufficiently populated tool, domain or agent slices"). Pure: the benchmark's
per-pair outcomes in, a decision and its report out.

The rule (docs/shared-evaluator.md):

- Overall: the candidate's benchmark accuracy must be strictly higher than the incumbent's on the
  same pairs. A first release (no incumbent) needs reviewed training data, a non-empty benchmark
  and accuracy above chance: the lower end of its 95% interval above 0.5.
- Slices: a comparison belongs to the slice of each tool its sides call (``pair_tools``: one tool
  against another counts in both), and to its domain and agent slices. A slice is judged when
  it holds at least ``min_slice_pairs()`` benchmark pairs: the size at which a 95% interval
  around 50% is at most +/-0.25 wide. A judged slice regresses when the incumbent's accuracy
  lies above the upper end of the candidate's 95% Wilson interval on that slice. The tolerance
  (the interval's upper end minus the candidate's accuracy) shrinks with the slice's size, as
  1/sqrt(n): noise in a small slice neither blocks a release nor lets a real drop in a large one
  through.
- The candidate must score actions (trained on action comparisons): its credits come from
  ``action_reward_stats.json``.
- A saturated benchmark (the incumbent right on every pair, so at the ceiling on every populated
  slice) cannot be beaten overall: the rule stands, and the report says so and what to add.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stash_pipeline.core.estimates import wilson_interval
from stash_pipeline.core.training_settings import (
    GATE_Z,
    MAX_SLICE_HALF_WIDTH,
    MIN_REVIEWED_TRAINING_PAIRS,
)

SLICE_KINDS: tuple[str, ...] = ("tool", "domain", "agent")
CHANCE = 0.5


@dataclass(frozen=True)
class BenchmarkOutcome:
    """One benchmark pair: did each model score the chosen side strictly above the rejected?"""

    pair_id: str
    slices: Mapping[str, str | None]  # tool, domain, agent (core.pairs.Pair.slices)
    candidate: bool
    incumbent: bool | None = None  # None without an incumbent
    tools: tuple[str, ...] = ()  # every tool its sides call (pair_tools); else slices["tool"]


def slice_keys(slices: Mapping[str, str | None], tools: Sequence[str] = ()
               ) -> list[tuple[str, str]]:
    """The (kind, value) slices a comparison belongs to: each tool its sides call (``tools``,
    else ``slices["tool"]``), its domain and its agent."""
    keys = [("tool", tool) for tool in (tools or [v for v in (slices.get("tool"),) if v])]
    keys.extend((kind, value) for kind in SLICE_KINDS
                if kind != "tool" and (value := slices.get(kind)) is not None)
    return keys


def min_slice_pairs(z: float = GATE_Z, half_width: float = MAX_SLICE_HALF_WIDTH) -> int:
    """The smallest slice whose 95% interval at 50% accuracy is at most +/-``half_width``."""
    return math.ceil((z / (2 * half_width)) ** 2)


def _accuracy(values: Sequence[bool]) -> float | None:
    return sum(values) / len(values) if values else None


def _summary(outcomes: Sequence[BenchmarkOutcome]) -> dict[str, Any]:
    correct = sum(o.candidate for o in outcomes)
    low, high = wilson_interval(correct, len(outcomes))
    incumbent = [o.incumbent for o in outcomes if o.incumbent is not None]
    return {"pairs": len(outcomes), "candidate": _accuracy([o.candidate for o in outcomes]),
            "incumbent": _accuracy(incumbent) if len(incumbent) == len(outcomes) else None,
            "candidate_low": low, "candidate_high": high}


def _slice_rows(outcomes: Sequence[BenchmarkOutcome], *, compared: bool,
                minimum: int) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[BenchmarkOutcome]] = defaultdict(list)
    for outcome in outcomes:
        for key in slice_keys(outcome.slices, outcome.tools):
            groups[key].append(outcome)
    rows = []
    for (kind, value), members in sorted(groups.items()):
        row = {"slice": kind, "value": value, **_summary(members),
               "populated": len(members) >= minimum}
        if not compared:
            row["decision"] = "not compared (first release)"
        elif not row["populated"]:
            row["decision"] = "too small to judge"
        elif row["incumbent"] > row["candidate_high"]:
            row["decision"] = "regression"
        elif row["candidate"] < row["incumbent"]:
            row["decision"] = "within noise"
        else:
            row["decision"] = "ok"
        row["tolerance"] = row["candidate_high"] - row["candidate"]
        rows.append(row)
    return rows


def saturated(outcomes: Sequence[BenchmarkOutcome]) -> bool:
    """Whether the incumbent is right on every benchmark pair: nothing is left to beat."""
    return bool(outcomes) and all(o.incumbent for o in outcomes)


def release_gate(outcomes: Iterable[BenchmarkOutcome], *, incumbent: str | None,
                 reviewed_training_pairs: int, scores_actions: bool) -> dict[str, Any]:
    """The decision and the report a person reads: overall, per slice, and every blocking reason.

    ``incumbent`` is the current release's version (None before the first release); every outcome
    then carries the incumbent's result on the same pair.
    """
    outcomes = list(outcomes)
    compared = incumbent is not None
    if compared and any(o.incumbent is None for o in outcomes):
        raise ValueError("every benchmark outcome needs the incumbent's result")
    minimum = min_slice_pairs()
    overall = _summary(outcomes)
    slices = _slice_rows(outcomes, compared=compared, minimum=minimum)
    reasons: list[str] = []
    if not scores_actions:
        reasons.append("the candidate scores no actions: it was not trained on action "
                       "comparisons, so it has no action_reward_stats.json")
    if not outcomes:
        reasons.append("the benchmark is empty: it needs human-reviewed or verified-outcome "
                       "comparisons on opted-in traces")
        overall["decision"] = "empty benchmark"
    elif compared:
        beats = overall["candidate"] > overall["incumbent"]
        overall["decision"] = "beats the incumbent" if beats else "does not beat the incumbent"
        if not beats:
            reasons.append(f"the candidate's accuracy {overall['candidate']:.3f} does not beat the "
                           f"incumbent {incumbent}'s {overall['incumbent']:.3f} on "
                           f"{overall['pairs']} benchmark pairs")
        if saturated(outcomes):
            populated = [f"{r['slice']} {r['value']!r}" for r in slices if r["populated"]]
            reasons.append(
                f"the benchmark is saturated: the incumbent {incumbent} is right on all "
                f"{overall['pairs']} benchmark pairs (at the ceiling on every populated slice: "
                f"{', '.join(populated) or 'none populated'}), so no candidate can beat it "
                "overall; add independently reviewed comparisons or verified outcomes the "
                "incumbent gets wrong, on new tasks or harder cases")
    else:
        above = overall["candidate_low"] > CHANCE
        overall["decision"] = "above chance" if above else "not above chance"
        if not above:
            reasons.append(f"accuracy {overall['candidate']:.3f} on {overall['pairs']} benchmark "
                           f"pairs is not above chance: its 95% interval starts at "
                           f"{overall['candidate_low']:.3f}")
    if not compared and reviewed_training_pairs < MIN_REVIEWED_TRAINING_PAIRS:
        reasons.append("the first release needs reviewed training data: no training pair comes "
                       "from an independently reviewed comparison")
    for row in slices:
        if row["decision"] == "regression":
            reasons.append(
                f"regression on {row['slice']} {row['value']!r}: the incumbent's "
                f"{row['incumbent']:.3f} lies above the candidate's 95% interval "
                f"[{row['candidate_low']:.3f}, {row['candidate_high']:.3f}] "
                f"({row['candidate']:.3f} on {row['pairs']} pairs)")
    return {
        "passed": not reasons, "first_release": not compared, "incumbent": incumbent,
        "saturated": compared and saturated(outcomes),
        "reasons": reasons, "overall": overall, "slices": slices,
        "reviewed_training_pairs": reviewed_training_pairs, "scores_actions": scores_actions,
        "rule": {"confidence": 0.95, "z": GATE_Z, "min_slice_pairs": minimum,
                 "max_slice_half_width": MAX_SLICE_HALF_WIDTH,
                 "min_reviewed_training_pairs": MIN_REVIEWED_TRAINING_PAIRS},
    }
