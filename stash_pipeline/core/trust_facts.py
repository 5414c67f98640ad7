"""What a trust report reads (``core.trust``): the facts of one evaluator on one account's traces
it did not train on, and the flat figures the report is made of. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TraceFacts:
    """One trace the evaluator did not train on, and what is known of it."""

    id: str
    agent: str | None = None
    domain: str | None = None
    tools: tuple[str, ...] = ()
    succeeded: bool | None = None  # verified outcome: every check succeeded; None without one
    rating: float | None = None  # the mean of its trace ratings
    score: float | None = None  # the evaluator's whole-trace raw reward
    calibrated: float | None = None
    mean_credit: float | None = None  # the mean of its actions' credit by this evaluator
    input_tokens: int | None = None  # its whole rendering's tokens before the window cut
    group: str | None = None  # its task by the grouping rule (docs/trust.md); None: on its own
    length: int | None = None  # its messages: what the trace-length rule reads
    untrained: float | None = None  # the untrained base's raw reward (a fresh score head)


@dataclass(frozen=True)
class StepFacts:
    """A rated action of such a trace: the mean of its step ratings and its credit."""

    action_id: str
    rating: float
    credit: float
    tool: str | None = None
    agent: str | None = None
    domain: str | None = None


@dataclass(frozen=True)
class HeldOutCount:
    """Held-out pairs of one slice (``OVERALL`` for all) and how many the evaluator got right."""

    slice_kind: str
    slice: str
    pairs: int
    correct: int


@dataclass(frozen=True)
class Figure:
    metric: str
    slice_kind: str  # all, tool, domain, agent; bin for the reliability curve
    slice: str  # "" for all
    value: float | None
    low: float | None
    high: float | None
    n: int
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrustFacts:
    evaluator: str
    kind: str  # "shared" (a release) or "personal"
    traces: Sequence[TraceFacts]  # not trained on
    steps: Sequence[StepFacts] = ()
    held_out: Sequence[HeldOutCount] = ()
    held_out_source: str = "held-out pairs"
    held_out_unavailable: str | None = None  # why there are none, when known
    trained_traces: int = 0  # the owner's traces left out: the evaluator trained on them
    window: int | None = None  # tokens each input keeps (from the end)
    raw_scores: Sequence[float] = ()  # every whole-trace raw reward on the owner's traces
    action_raw_range: tuple[float, float, int] | None = None  # min, max and count of actions'
    scored_actions: int = 0  # actions not trained on whose rendering's length is known
    cut_action_tokens: Sequence[int] = ()  # the lengths of those longer than the window
    # Training and held-out pairs, and how many had a side cut (the worker's metrics).
    training_pairs: int | None = None
    truncated_training_pairs: int | None = None
    held_out_only: bool = False  # a checkpoint's report before it scored anyone's traces
    # (length, succeeded) of the owner's traces it trained on that have a verified outcome: they
    # fix the trace-length rule's direction, never the traces it is evaluated on.
    trained_lengths: Sequence[tuple[int, bool]] = ()
    grouping: str = "task"  # the grouping rule's name (docs/trust.md, Groups)
