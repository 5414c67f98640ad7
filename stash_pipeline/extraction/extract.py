"""Feedback -> generated-alternative pairs: one request per trace, every answer validated."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from stash_pipeline.core.extraction_inputs import ExtractionInput, extraction_inputs
from stash_pipeline.core.feedback import Comment
from stash_pipeline.core.pair_builders import Audience
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.traces import Trace
from stash_pipeline.extraction.alternatives import preference_pair
from stash_pipeline.extraction.config import ExtractionConfig
from stash_pipeline.extraction.validate import Skip, validate_answer


class Extractor(Protocol):
    def answer(self, item: ExtractionInput) -> Any: ...


@dataclass(frozen=True)
class ExtractionResult:
    pairs: tuple[Pair, ...] = ()
    skipped: tuple[tuple[str, Skip], ...] = ()  # (trace id, skip): ambiguous feedback
    requests: int = 0

    @property
    def skipped_count(self) -> int:
        return len(self.skipped)


@dataclass
class _Collected:
    pairs: list[Pair] = field(default_factory=list)
    skipped: list[tuple[str, Skip]] = field(default_factory=list)


def extract_pairs(items: Sequence[ExtractionInput], extractor: Extractor) -> ExtractionResult:
    """Ask once per trace; an invalid answer raises ExtractionError naming trace and action."""
    collected = _Collected()
    for item in items:
        answer = validate_answer(item, extractor.answer(item))
        collected.pairs += [preference_pair(item.trace, p) for p in answer.preferences]
        collected.skipped += [(item.trace.id, skip) for skip in answer.skipped]
    return ExtractionResult(tuple(sorted(collected.pairs, key=lambda p: p.id)),
                            tuple(collected.skipped), len(items))


def extract_items(items: Sequence[ExtractionInput],
                  config: ExtractionConfig | None = None) -> ExtractionResult:
    """Extraction for a training job: no request (and no key needed) when nothing needs one."""
    if not items:
        return ExtractionResult()
    from stash_pipeline.extraction.client import AnthropicExtractor  # the SDK only when needed

    extractor = AnthropicExtractor(config or ExtractionConfig.from_env(), pending_traces=len(items))
    return extract_pairs(items, extractor)


def extract_feedback_pairs(traces: Sequence[Trace], comments: Iterable[Comment],
                           audience: Audience = "personal",
                           config: ExtractionConfig | None = None) -> ExtractionResult:
    """The extraction pairs of these traces' comments, corrections and (personal) assessment."""
    return extract_items(extraction_inputs(traces, comments, audience), config)
