"""An import as the CLI and the API run it: one transaction, and counts by format, owner, domain."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.store import Store

BREAKDOWN = ("format", "owner", "domain")


@dataclass
class ImportReport:
    summary: dict[str, int]  # the store's ImportSummary
    breakdown: dict[str, Counter] = field(default_factory=lambda: {k: Counter() for k in BREAKDOWN})

    def as_dict(self) -> dict[str, Any]:
        return {**self.summary, **{f"by_{k}": dict(v) for k, v in self.breakdown.items()}}


def import_records(store: Store, records: Iterable[ImportedTrace], *,
                   on_progress: Callable[[int], None] | None = None) -> ImportReport:
    """All or nothing (``Store.import_traces``); the counts describe what was stored."""
    report = ImportReport({})

    def counted(items: Iterable[ImportedTrace]) -> Iterator[ImportedTrace]:
        for record in items:
            report.breakdown["format"][record.format or "unknown"] += 1
            report.breakdown["owner"][record.trace.owner] += 1
            report.breakdown["domain"][record.trace.domain or "none"] += 1
            yield record

    report.summary = store.import_traces(counted(records), on_progress=on_progress).as_dict()
    return report
