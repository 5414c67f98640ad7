"""The counts a job and `pairs preview` report about a model's pairs (no I/O, no model)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from stash_pipeline.core.pairs import SOURCE_KINDS, Pair
from stash_pipeline.core.split import PairSplit

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
        "eval_unavailable_reason": split.eval_unavailable_reason if split else None,
    }
