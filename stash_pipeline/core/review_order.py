"""The review queue's order: what a person should look at next, and why (docs/viewer.md, "The
review queue").

The queue holds the owner's traces nobody has reviewed yet and the comparisons on them that wait
for a reviewer other than their author. It puts first what the evaluators are least sure of:

1. ``comparison``: a comparison someone else filed, waiting for a review (oldest first): the
   shared evaluator learns only from independently reviewed ones.
2. ``disagreement``: the shared release and the personal model disagree in sign on the trace
   (largest gap first).
3. ``outcome``: the evaluator's verdict contradicts a verified outcome: a trace that succeeded
   with negative credit, or failed with positive credit (largest contradiction first).
4. ``near_reference``: an action's credit is within NEAR_REFERENCE of zero, the evaluator's
   reference midpoint, where it cannot tell better from worse (closest first).
5. ``score``: the rest, lowest score first (the seed: "Sorting unannotated traces by score is a
   fast way to find what to review next").
6. ``unscored``: no evaluator has scored the trace yet (oldest first).
7. ``skipped``: items a reviewer skipped, after everything else (longest skipped first).

The verdicts are put on one scale, -1 to +1: the release's mean action credit, and the personal
model's mean action credit, or 2 x calibrated - 1 for a model that scored whole traces only. The
store sorts in SQL by ``reason_rank`` and ``sort_key`` (``store/review_queue.py``); these functions
are the same rules for one item, which the pages use to explain and focus it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# |credit| below this: the evaluator is at its reference midpoint for the action.
NEAR_REFERENCE = 0.1
REASONS = ("comparison", "disagreement", "outcome", "near_reference", "score", "unscored",
           "skipped")
REASON_TEXT = {
    "comparison": "a comparison someone else filed waits for your review",
    "disagreement": "the shared release and your personal model disagree on this trace",
    "outcome": "the evaluator's verdict contradicts the verified outcome",
    "near_reference": "an action's credit is near the reference midpoint: the evaluator "
                      "cannot tell better from worse",
    "score": "next by score, lowest first",
    "unscored": "no evaluator has scored this trace yet",
    "skipped": "skipped earlier",
}


@dataclass(frozen=True)
class Verdicts:
    """What the evaluators and the checks say of one trace, each on the -1..+1 scale."""

    shared: float | None = None  # the release's mean action credit
    personal: float | None = None  # the personal model's (personal_verdict)
    outcome_succeeded: bool | None = None  # None: no verified outcome
    nearest: float | None = None  # the smallest |credit| of an action
    skipped: bool = False

    @property
    def verdict(self) -> float | None:
        """The one the queue reads when it needs one: the release's, else the personal model's."""
        return self.shared if self.shared is not None else self.personal


def personal_verdict(mean_credit: float | None, calibrated: float | None) -> float | None:
    """A personal model's verdict on the -1..+1 scale: its mean action credit, or for a model
    that scored the whole trace only, its calibrated score (0..1, 0.5 at the reference) spread
    to -1..+1."""
    if mean_credit is not None:
        return mean_credit
    return None if calibrated is None else 2.0 * calibrated - 1.0


def reason(v: Verdicts) -> str:
    """Why a trace is where it is in the queue (a REASONS name other than ``comparison``)."""
    if v.skipped:
        return "skipped"
    if v.shared is not None and v.personal is not None and v.shared * v.personal < 0:
        return "disagreement"
    verdict = v.verdict
    if v.outcome_succeeded is not None and verdict is not None and (
            (v.outcome_succeeded and verdict < 0) or (not v.outcome_succeeded and verdict > 0)):
        return "outcome"
    if v.nearest is not None and v.nearest < NEAR_REFERENCE:
        return "near_reference"
    return "score" if verdict is not None else "unscored"


def reason_rank(name: str) -> int:
    return REASONS.index(name)


def sort_key(v: Verdicts) -> float:
    """Within its reason, smaller comes first."""
    name = reason(v)
    if name == "disagreement":
        return -abs(v.shared - v.personal)
    if name == "outcome":
        return -abs(v.verdict)
    if name == "near_reference":
        return v.nearest
    if name == "score":
        return v.verdict
    return 0.0


def focus_action(name: str, shared: Mapping[str, float | None],
                 personal: Mapping[str, float | None],
                 outcome_succeeded: bool | None) -> str | None:
    """The action a reviewer should look at first, given each evaluator's credit by action id:
    where the two disagree most, the one that most contradicts the outcome, the one nearest the
    reference, or the lowest-credited one. None when no action has credit."""
    credits = {a: c for a, c in shared.items() if c is not None} or \
        {a: c for a, c in personal.items() if c is not None}
    if not credits:
        return None
    if name == "disagreement":
        both = {a: abs(c - personal[a]) for a, c in shared.items()
                if c is not None and personal.get(a) is not None}
        if both:
            return max(both, key=lambda a: (both[a], a))
    if name == "outcome" and outcome_succeeded is not None:
        return (min if outcome_succeeded else max)(credits, key=lambda a: (credits[a], a))
    if name == "near_reference":
        return min(credits, key=lambda a: (abs(credits[a]), a))
    return min(credits, key=lambda a: (credits[a], a))
