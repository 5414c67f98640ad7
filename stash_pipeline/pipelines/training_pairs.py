"""The one function that assembles a model's pairs: build, extract, cap, split, in that order.

Training (personal models and shared candidates) and ``pairs preview`` both call it (DESIGN §2: one
pair builder, one split). The preview passes ``extract=False``: it calls no model and reports what
would need extraction under ``pending_extraction``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stash_pipeline.core.extraction_inputs import extraction_inputs
from stash_pipeline.core.feedback import Comment, Feedback, split_orphaned
from stash_pipeline.core.pair_builders import Audience, audience_traces, build_feedback_pairs
from stash_pipeline.core.pair_report import pair_report
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.sampling import cap_pairs
from stash_pipeline.core.split import NotEnoughPairsError, PairSplit, split_pairs
from stash_pipeline.core.traces import Trace
from stash_pipeline.core.training_settings import DEFAULT_MAX_PAIRS
from stash_pipeline.extraction.config import ExtractionConfig
from stash_pipeline.extraction.extract import ExtractionResult, extract_items

EXTRACTED_KINDS = ("comment", "correction", "assessment")


@dataclass(frozen=True)
class TrainingPairs:
    pairs: tuple[Pair, ...]  # after the max_pairs cap: what the split divided
    split: PairSplit | None  # None when fewer than the minimum of usable pairs
    report: dict[str, Any]  # by_source, split counts, extraction counts, error

    def require_split(self) -> PairSplit:
        """The split, or NotEnoughPairsError: a training job needs the seed's minimum."""
        if self.split is None:
            raise NotEnoughPairsError(len(self.pairs))
        return self.split


def training_pairs(traces: Sequence[Trace], feedback: Sequence[Feedback], *,
                   audience: Audience = "personal", max_pairs: int = DEFAULT_MAX_PAIRS,
                   extract: bool = True, config: ExtractionConfig | None = None) -> TrainingPairs:
    """Every pair the feedback on ``traces`` gives this audience, capped and split.

    With ``extract`` (a training job) comments, corrections and automatic assessment go to the
    extraction model, unless the deployment turned extraction off (``STASH_EXTRACTION=off``);
    ExtractionError and MissingApiKeyError propagate. Too few pairs is not raised here: ``split``
    is None and ``report["error"]`` says why (``require_split`` raises it).
    """
    config = config or ExtractionConfig.from_env()
    selected = audience_traces(traces, audience)
    feedback, orphaned = split_orphaned(selected, feedback)
    built = build_feedback_pairs(selected, feedback, audience)
    pending = extraction_inputs(selected, [f for f in feedback if isinstance(f, Comment)], audience)
    extracted = extract_items(pending, config) if extract and config.enabled else ExtractionResult()
    capped = cap_pairs([*built, *extracted.pairs], max_pairs)
    try:
        split, error = split_pairs(capped.pairs), None
    except NotEnoughPairsError as exc:
        split, error = None, str(exc)
    not_extracted = Counter()
    if not extracted.requests:
        for item in pending:
            not_extracted.update(item.counts())
    report = {
        "audience": audience, "traces": len(selected), "max_pairs": max_pairs,
        **pair_report(capped.pairs, capped.dropped, split,
                      orphaned_feedback=len(orphaned)),
        "extraction": "on" if config.enabled else "off",
        "extraction_requests": extracted.requests,
        "skipped_ambiguous": extracted.skipped_count,
        "pending_extraction": {"traces": 0 if extracted.requests else len(pending),
                               **{kind: not_extracted.get(kind, 0) for kind in EXTRACTED_KINDS}},
        "error": error,
    }
    return TrainingPairs(capped.pairs, split, report)
