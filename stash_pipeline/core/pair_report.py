"""What a model would train on, without training or calling any model (`pairs preview`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from stash_pipeline.core.extraction_inputs import extraction_inputs
from stash_pipeline.core.feedback import Comment, Feedback, split_orphaned
from stash_pipeline.core.pair_builders import Audience, audience_traces, build_feedback_pairs
from stash_pipeline.core.pairs import SOURCE_KINDS, Pair
from stash_pipeline.core.sampling import cap_pairs
from stash_pipeline.core.training_settings import DEFAULT_MAX_PAIRS
from stash_pipeline.core.split import NotEnoughPairsError, PairSplit, split_pairs
from stash_pipeline.core.traces import Trace

SPLIT_COUNT_FIELDS = ("train_pairs", "eval_pairs", "action_train_pairs", "action_eval_pairs",
                      "tool_train_pairs", "tool_eval_pairs", "excluded_cross_trace_pairs",
                      "train_traces", "eval_traces")


def by_source(pairs: Iterable[Pair]) -> dict[str, int]:
    """Counts keyed by every source kind, zeros included, so consumers never miss a key."""
    counts = Counter(p.source_kind for p in pairs)
    return {kind: counts.get(kind, 0) for kind in SOURCE_KINDS}


def pair_report(pairs: Sequence[Pair], dropped_by_max_pairs: int,
                split: PairSplit | None, *, orphaned_feedback: int = 0) -> dict[str, Any]:
    """The counts a job and the preview report: by source, split sizes, action and tool pairs,
    and the feedback left out because its action no longer exists (``orphaned_feedback``)."""
    counts = split.counts() if split else {name: 0 for name in SPLIT_COUNT_FIELDS}
    return {
        "by_source": by_source(pairs),
        "pairs": len(pairs),
        "dropped_by_max_pairs": dropped_by_max_pairs,
        "orphaned_feedback": orphaned_feedback,
        **{name: counts[name] for name in SPLIT_COUNT_FIELDS},
        "action_pairs": sum(p.kind == "action" for p in pairs),
        "tool_pairs": sum(p.is_tool_call for p in pairs),
        "generated_pairs": sum(p.generated for p in pairs),
        "eval_available": bool(split and split.eval_available),
    }


def preview_pairs(traces: Sequence[Trace], feedback: Sequence[Feedback], *,
                  audience: Audience = "personal",
                  max_pairs: int = DEFAULT_MAX_PAIRS) -> dict[str, Any]:
    """Deterministic pairs built, capped and split as training would; extraction only counted.

    Feedback that needs extraction is reported under ``pending_extraction`` (no model is called),
    so ``by_source`` shows zero for comment, correction and assessment.
    """
    selected = audience_traces(traces, audience)
    feedback, orphaned = split_orphaned(selected, feedback)
    capped = cap_pairs(build_feedback_pairs(selected, feedback, audience), max_pairs)
    error = None
    try:
        split = split_pairs(capped.pairs)
    except NotEnoughPairsError as exc:
        split, error = None, str(exc)
    pending = extraction_inputs(selected, [f for f in feedback if isinstance(f, Comment)],
                                audience)
    pending_counts = Counter()
    for item in pending:
        pending_counts.update(item.counts())
    return {
        "audience": audience,
        "traces": len(selected),
        "max_pairs": max_pairs,
        **pair_report(capped.pairs, capped.dropped, split, orphaned_feedback=len(orphaned)),
        "pending_extraction": {"traces": len(pending),
                               **{k: pending_counts.get(k, 0)
                                  for k in ("comment", "correction", "assessment")}},
        "error": error,
    }
