"""An import as the CLI and the API run it: one transaction, and counts by format, owner, domain."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from stash_pipeline.core.feedback import VerifiedOutcome
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.store import Store
from stash_pipeline.store.locks import ConcurrentWriteError

BREAKDOWN = ("format", "owner", "domain")
# An import PostgreSQL rolled back to break a deadlock is read and stored again from the start.
DEADLOCK_ATTEMPTS = 3


MAX_KEYS_SHOWN = 12  # metadata keys a warning about an unmatched --outcome-field names


@dataclass
class OutcomeField:
    """What an asked-for ``--outcome-field`` found: the traces whose metadata held an outcome at
    its path, and the top-level metadata keys seen (for the warning when it matched none)."""

    path: str  # as read: metadata.<path>
    matched: int = 0
    keys: set[str] = field(default_factory=set)

    def warning(self, traces: int) -> str | None:
        if self.matched or not traces:
            return None
        keys = sorted(self.keys)
        seen = (f"; the traces' metadata has {', '.join(keys[:MAX_KEYS_SHOWN])}"
                + (f" and {len(keys) - MAX_KEYS_SHOWN} more" if len(keys) > MAX_KEYS_SHOWN else "")
                if keys else "; the traces have no metadata")
        return (f"the outcome field {self.path} matched nothing: none of the {traces} traces has "
                f"a value there, so no verified outcome was read from it{seen}")


@dataclass
class ImportReport:
    summary: dict[str, int]  # the store's ImportSummary
    breakdown: dict[str, Counter] = field(default_factory=lambda: {k: Counter() for k in BREAKDOWN})
    outcome_field: OutcomeField | None = None  # only when the caller named the field

    def as_dict(self) -> dict[str, Any]:
        counts = {**self.summary, **{f"by_{k}": dict(v) for k, v in self.breakdown.items()}}
        if self.outcome_field is not None:
            counts["outcome_field"] = self.outcome_field.path
            counts["outcome_field_matched"] = self.outcome_field.matched
        return counts

    def warnings(self) -> list[str]:
        """What the person should know although nothing failed (an --outcome-field that matched
        no trace)."""
        found = self.outcome_field and self.outcome_field.warning(self.summary.get("traces", 0))
        return [found] if found else []


def import_records(store: Store, read: Callable[[], Iterable[ImportedTrace]], *,
                   on_progress: Callable[[int], None] | None = None,
                   outcome_field: str | None = None) -> ImportReport:
    """All or nothing (``Store.import_traces``) over the records ``read()`` yields.

    A deadlock PostgreSQL broke by rolling the import back is tried again from a fresh ``read()``,
    up to three times; the counts describe what was stored. ``outcome_field``: the metadata path
    the caller asked to read outcomes from; the report counts the traces it matched.
    """
    for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
        report = ImportReport({}, outcome_field=OutcomeField(
            f"metadata.{outcome_field.removeprefix('metadata.')}") if outcome_field else None)
        try:
            report.summary = store.import_traces(_counted(read(), report),
                                                 on_progress=on_progress).as_dict()
            return report
        except ConcurrentWriteError as error:
            if not error.deadlock or attempt == DEADLOCK_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _counted(records: Iterable[ImportedTrace], report: ImportReport) -> Iterator[ImportedTrace]:
    asked = report.outcome_field
    for record in records:
        report.breakdown["format"][record.format or "unknown"] += 1
        report.breakdown["owner"][record.trace.owner] += 1
        report.breakdown["domain"][record.trace.domain or "none"] += 1
        if asked is not None:
            asked.matched += any(isinstance(item, VerifiedOutcome) and item.source == asked.path
                                 for item in record.feedback)
            if len(asked.keys) <= MAX_KEYS_SHOWN * 8:  # enough to name, bounded
                asked.keys.update(str(key) for key in record.trace.metadata)
        yield record
