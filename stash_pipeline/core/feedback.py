"""Feedback people leave on traces (DESIGN §3): comments, ratings, reviewed comparisons,
outcomes."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.traces import STASH_NAMESPACE, Trace, local_part, parse_action_address

FeedbackKind = Literal["comment", "rating", "comparison", "outcome"]
REVIEW_STATUSES = ("pending", "approved", "rejected")
# A verified outcome at or above this reward is a success; a trace succeeded when all of its did.
SUCCESS_REWARD = 1.0


def feedback_id(kind: str, *parts: object) -> str:
    """A stable id, so importing the same feedback twice stores it once."""
    name = "|".join([kind, *map(str, parts)])
    # Text with a lone surrogate cannot be encoded: escape it, so the id exists and validation
    # can refuse the text itself with a clear error.
    name = name.encode("utf-8", "backslashreplace").decode("utf-8")
    return str(uuid.uuid5(STASH_NAMESPACE, name))


@dataclass(frozen=True)
class Comment:
    """A comment on an action (action_id set) or on a whole trace."""

    id: str
    trace_id: str
    text: str
    action_id: str | None = None
    author: str | None = None
    # Set by the store: the action's content changed since (a reimport); orphaned like feedback on
    # an action that no longer exists. Not stored: the store derives it from content digests.
    detached: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class Rating:
    """An API rating: on an action it is a step rating, else a trace rating. Higher is better."""

    id: str
    trace_id: str
    value: float
    action_id: str | None = None
    author: str | None = None
    detached: bool = field(default=False, compare=False)  # as Comment.detached

    @property
    def is_step_rating(self) -> bool:
        return self.action_id is not None


@dataclass(frozen=True)
class ReviewedComparison:
    """A reviewed A-vs-B judgment: chosen beats rejected. Sides are traces or actions.

    ``author`` made the comparison; ``reviewer`` approved (or rejected) it.
    """

    id: str
    chosen_trace_id: str
    rejected_trace_id: str
    chosen_action_id: str | None = None
    rejected_action_id: str | None = None
    reviewer: str | None = None
    status: str = "approved"
    rationale: str | None = None
    author: str | None = None
    detached: bool = field(default=False, compare=False)  # as Comment.detached (either side)

    @property
    def is_action_comparison(self) -> bool:
        return self.chosen_action_id is not None and self.rejected_action_id is not None

    @property
    def usable(self) -> bool:
        return self.status == "approved"

    @property
    def independently_reviewed(self) -> bool:
        """Approved by a known reviewer who is not its known author: what the shared evaluator
        learns from and is benchmarked on (the seed's "independently reviewed comparisons")."""
        return (self.usable and bool(self.reviewer) and bool(self.author)
                and self.reviewer != self.author)


@dataclass(frozen=True)
class VerifiedOutcome:
    """A trace's checked task result (e.g. tau-bench's reward: 1.0 success, 0.0 failure)."""

    id: str
    trace_id: str
    reward: float
    source: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.reward >= SUCCESS_REWARD


Feedback = Comment | Rating | ReviewedComparison | VerifiedOutcome


def feedback_words(item: Feedback, trace_id: str) -> str:
    """One feedback item on the trace ``trace_id`` in words, as ``traces show`` prints it:
    ``rating -1 on m4``, ``comment on the trace: "..."``, ``comparison: m2 preferred to
    <trace>/m2 (approved by qa, author ana)``, ``outcome 1 (tau2)``. Actions of this trace by
    their local id; a note when a reimport detached it."""
    def where(action_id: str | None, of: str = trace_id) -> str:
        if action_id is None:
            return "the whole trace" if of == trace_id else f"trace {of}"
        return local_part(action_id, trace_id)

    by = f", by {item.author}" if getattr(item, "author", None) else ""
    if isinstance(item, Rating):
        words = f"rating {item.value:+g} on {where(item.action_id)}{by}".replace("+0 ", "0 ")
    elif isinstance(item, Comment):
        words = f'comment on {where(item.action_id)}{by}: "{item.text}"'
    elif isinstance(item, ReviewedComparison):
        review = item.status if item.reviewer is None else f"{item.status} by {item.reviewer}"
        words = (f"comparison: {where(item.chosen_action_id, item.chosen_trace_id)} preferred "
                 f"to {where(item.rejected_action_id, item.rejected_trace_id)} ({review}"
                 f"{', author ' + item.author if item.author else ''})")
    else:
        words = f"outcome {item.reward:g}" + (f" ({item.source})" if item.source else "")
    detached = (" [detached: a reimport changed what it is about]"
                if getattr(item, "detached", False) else "")
    return words + detached


@dataclass(frozen=True)
class Review:
    """A review of a stored comparison (not feedback itself: it changes a comparison's status)."""

    comparison_id: str
    reviewer: str
    status: str = "approved"


def comparison_item(chosen: str, rejected: str, *, author: str | None = None,
                    reviewer: str | None = None, status: str = "pending",
                    rationale: str | None = None) -> ReviewedComparison:
    """CHOSEN beats REJECTED; each ``<trace id>`` or ``<trace id>/<action>``, two actions or two
    traces. Pending unless reviewed: a status other than pending needs its reviewer. One
    comparison per author and sides, so comparing again replaces the earlier one."""
    sides = []
    for side, address in (("chosen", chosen), ("rejected", rejected)):
        if not isinstance(address, str) or not address:
            raise InputError("expected a trace id or <trace id>/<action>", field=side)
        try:
            sides.append(parse_action_address(address))
        except ValueError as error:
            raise InputError(str(error), field=side) from None
    (chosen_trace, chosen_action), (rejected_trace, rejected_action) = sides
    if sides[0] == sides[1]:
        raise InputError("a comparison needs two different sides, not the same one twice",
                         field="rejected")
    if (chosen_action is None) != (rejected_action is None):
        raise InputError("compare two actions or two whole traces, not an action with a trace",
                         field="rejected")
    if status not in REVIEW_STATUSES:
        raise InputError(f"unknown status {status!r}; expected one of "
                         f"{', '.join(REVIEW_STATUSES)}", field="status")
    if status != "pending" and not reviewer:
        raise InputError(f"a comparison {status} needs its reviewer", field="reviewer")
    return ReviewedComparison(
        feedback_id("comparison", chosen, rejected, author), chosen_trace, rejected_trace,
        chosen_action_id=chosen_action, rejected_action_id=rejected_action, reviewer=reviewer,
        status=status, rationale=rationale, author=author)


def outcome_item(trace_id: str, reward: float, source: str | None = None) -> VerifiedOutcome:
    """A verified outcome; one per trace and source, so recording it again replaces it."""
    return VerifiedOutcome(feedback_id("outcome", trace_id, source), trace_id, reward,
                           source=source)


def review_item(comparison_id: str, reviewer: str, status: str = "approved") -> Review:
    if not isinstance(comparison_id, str) or not comparison_id:
        raise InputError("a review names the comparison it reviews", field="comparison_id")
    if not isinstance(reviewer, str) or not reviewer:
        raise InputError("a review needs its reviewer", field="reviewer")
    if status not in REVIEW_STATUSES:
        raise InputError(f"unknown status {status!r}; expected one of "
                         f"{', '.join(REVIEW_STATUSES)}", field="status")
    return Review(comparison_id, reviewer, status)


def feedback_trace_ids(item: Feedback) -> tuple[str, ...]:
    if isinstance(item, ReviewedComparison):
        return (item.chosen_trace_id, item.rejected_trace_id)
    return (item.trace_id,)


def count_by_kind(items: list[Feedback]) -> dict[str, int]:
    counts = {"comments": 0, "ratings": 0, "comparisons": 0, "outcomes": 0}
    names = {Comment: "comments", Rating: "ratings", ReviewedComparison: "comparisons",
             VerifiedOutcome: "outcomes"}
    for item in items:
        counts[names[type(item)]] += 1
    return counts


def named_actions(item: Feedback) -> tuple[tuple[str, str], ...]:
    """(trace id, action id) of every action the item is about."""
    if isinstance(item, ReviewedComparison):
        sides = ((item.chosen_trace_id, item.chosen_action_id),
                 (item.rejected_trace_id, item.rejected_action_id))
    elif isinstance(item, (Comment, Rating)):
        sides = ((item.trace_id, item.action_id),)
    else:
        sides = ()
    return tuple((trace_id, action) for trace_id, action in sides if action)


def split_orphaned(traces: Iterable[Trace],
                   feedback: Iterable[Feedback]) -> tuple[list[Feedback], list[Feedback]]:
    """(usable, orphaned): orphaned feedback names an action its trace, among ``traces``, no
    longer has (a shorter reimport removed it), or one whose content changed since it was given
    (``detached``, set by the store). It is kept in the store, but no pair or extraction request
    can be built from it, and reports count it as ``orphaned_feedback``.

    Feedback on traces outside ``traces`` is left to the caller (it is usable or not by selection).
    """
    actions = {t.id: {a.local_id for a in t.actions()} for t in traces}
    usable: list[Feedback] = []
    orphaned: list[Feedback] = []
    for item in feedback:
        gone = getattr(item, "detached", False) or any(
            trace_id in actions and local_part(action, trace_id) not in actions[trace_id]
            for trace_id, action in named_actions(item))
        (orphaned if gone else usable).append(item)
    return usable, orphaned
