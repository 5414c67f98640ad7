"""An import as the CLI and the API run it: one transaction, and counts by format, owner, domain."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.store import Store
from stash_pipeline.store.locks import ConcurrentWriteError

BREAKDOWN = ("format", "owner", "domain")
# An import PostgreSQL rolled back to break a deadlock is read and stored again from the start.
DEADLOCK_ATTEMPTS = 3


@dataclass
class ImportReport:
    summary: dict[str, int]  # the store's ImportSummary
    breakdown: dict[str, Counter] = field(default_factory=lambda: {k: Counter() for k in BREAKDOWN})

    def as_dict(self) -> dict[str, Any]:
        return {**self.summary, **{f"by_{k}": dict(v) for k, v in self.breakdown.items()}}


def import_records(store: Store, read: Callable[[], Iterable[ImportedTrace]], *,
                   on_progress: Callable[[int], None] | None = None) -> ImportReport:
    """All or nothing (``Store.import_traces``) over the records ``read()`` yields.

    A deadlock PostgreSQL broke by rolling the import back is tried again from a fresh ``read()``,
    up to three times; the counts describe what was stored.
    """
    for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
        report = ImportReport({})
        try:
            report.summary = store.import_traces(_counted(read(), report),
                                                 on_progress=on_progress).as_dict()
            return report
        except ConcurrentWriteError as error:
            if not error.deadlock or attempt == DEADLOCK_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _counted(records: Iterable[ImportedTrace], report: ImportReport) -> Iterator[ImportedTrace]:
    for record in records:
        report.breakdown["format"][record.format or "unknown"] += 1
        report.breakdown["owner"][record.trace.owner] += 1
        report.breakdown["domain"][record.trace.domain or "none"] += 1
        yield record
