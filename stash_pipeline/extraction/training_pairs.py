"""Everything a training job does before it downloads a base model: build, extract, cap, split.

The one path for personal and shared-evaluator training (DESIGN §2: one pair builder, one split).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stash_pipeline.core.feedback import Comment, Feedback, split_orphaned
from stash_pipeline.core.pair_builders import Audience, audience_traces, build_feedback_pairs
from stash_pipeline.core.pair_report import pair_report
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.sampling import cap_pairs
from stash_pipeline.core.training_settings import DEFAULT_MAX_PAIRS
from stash_pipeline.core.split import PairSplit, split_pairs
from stash_pipeline.core.traces import Trace
from stash_pipeline.extraction.config import ExtractionConfig
from stash_pipeline.extraction.extract import extract_feedback_pairs


@dataclass(frozen=True)
class TrainingPairs:
    pairs: tuple[Pair, ...]  # after the max_pairs cap: what the split divided
    split: PairSplit
    report: dict[str, Any]  # by_source, split counts, dropped_by_max_pairs, orphaned_feedback,
    # skipped_ambiguous


def training_pairs(traces: Sequence[Trace], feedback: Sequence[Feedback], *,
                   audience: Audience = "personal", max_pairs: int = DEFAULT_MAX_PAIRS,
                   config: ExtractionConfig | None = None) -> TrainingPairs:
    """Raises ExtractionError / MissingApiKeyError / NotEnoughPairsError, all StashErrors."""
    selected = audience_traces(traces, audience)
    feedback, orphaned = split_orphaned(selected, feedback)
    built = build_feedback_pairs(selected, feedback, audience)
    comments = [f for f in feedback if isinstance(f, Comment)]
    extracted = extract_feedback_pairs(selected, comments, audience, config)
    capped = cap_pairs([*built, *extracted.pairs], max_pairs)
    split = split_pairs(capped.pairs)
    report = {"audience": audience, "traces": len(selected),
              **pair_report(capped.pairs, capped.dropped, split,
                            orphaned_feedback=len(orphaned)),
              "extraction_requests": extracted.requests,
              "skipped_ambiguous": extracted.skipped_count}
    return TrainingPairs(capped.pairs, split, report)
