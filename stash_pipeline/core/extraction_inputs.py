"""What a trace gives extraction to read (DESIGN §4): its comments, its later user messages
(possible corrections) and, for automatic assessment, its assistant actions.

Pure: the extraction client builds its request from this, and the pairs preview counts it as
pending without calling any model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from stash_pipeline.core.feedback import Comment
from stash_pipeline.core.pair_builders import AUDIENCE_SOURCES, Audience, audience_traces
from stash_pipeline.core.pairs import EXTRACTED_SOURCES
from stash_pipeline.core.traces import Action, Trace

ASSESSMENT_SOURCE_ID = "assessment"


@dataclass(frozen=True)
class UserMessage:
    local_id: str  # "m<index>", the id extraction answers cite as a correction's source
    text: str


@dataclass(frozen=True)
class ExtractionInput:
    trace: Trace
    comments: tuple[Comment, ...]
    corrections: tuple[UserMessage, ...]
    assess: bool  # automatic assessment of every assistant action

    @property
    def actions(self) -> list[Action]:
        return self.trace.actions()

    def counts(self) -> dict[str, int]:
        return {"comment": len(self.comments), "correction": len(self.corrections),
                "assessment": len(self.actions) if self.assess else 0}


def later_user_messages(trace: Trace) -> tuple[UserMessage, ...]:
    """User messages that follow an assistant action: where a user may correct the agent."""
    actions = trace.actions()
    if not actions:
        return ()
    first = actions[0].message_index
    return tuple(
        UserMessage(f"m{i}", m.content) for i, m in enumerate(trace.messages)
        if i > first and m.role == "user" and m.content.strip()
    )


def extraction_input(trace: Trace, comments: Iterable[Comment],
                     sources: Sequence[str]) -> ExtractionInput | None:
    """The trace's extraction request for the given extracted source kinds, or None if it has none.

    ``sources`` is a subset of ("comment", "correction", "assessment") for the audience.
    """
    own = tuple(sorted((c for c in comments if c.trace_id == trace.id and c.text.strip()),
                       key=lambda c: c.id)) if "comment" in sources else ()
    corrections = later_user_messages(trace) if "correction" in sources else ()
    assess = "assessment" in sources and bool(trace.actions())
    if not (own or corrections or assess):
        return None
    return ExtractionInput(trace, own, corrections, assess)


def extraction_inputs(traces: Sequence[Trace], comments: Iterable[Comment],
                      audience: Audience = "personal") -> list[ExtractionInput]:
    """The traces that need an extraction request for this audience, in trace id order."""
    sources = [s for s in EXTRACTED_SOURCES if s in AUDIENCE_SOURCES[audience]]
    comments = list(comments)
    items = (extraction_input(t, comments, sources)
             for t in sorted(audience_traces(traces, audience), key=lambda t: t.id))
    return [item for item in items if item is not None]
