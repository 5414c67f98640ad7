"""Importers: trace files in several formats, streamed into the one trace model.

``read_path`` is the entry point; docs/importing.md describes the formats and their field mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.traces import DEFAULT_OWNER
from stash_pipeline.importers import (
    agentprocessbench,
    anthropic_messages,
    openai_chat,
    otel_genai,
    preference,
    tau2,
)
from stash_pipeline.importers.common import DEFAULT_OUTCOME_FIELD, ImportOptions
from stash_pipeline.importers.detect import detect_format
from stash_pipeline.importers.jsonio import check_file_size
from stash_pipeline.importers.limits import DEFAULT_MAX_RECORD_BYTES, ImportLimits

Reader = Callable[[Path, ImportOptions], Iterator[ImportedTrace]]

READERS: dict[str, Reader] = {
    openai_chat.FORMAT: openai_chat.read,
    anthropic_messages.FORMAT: anthropic_messages.read,
    otel_genai.FORMAT: otel_genai.read,
    tau2.FORMAT: tau2.read,
    agentprocessbench.FORMAT: agentprocessbench.read,
    preference.FORMAT: preference.read,
}
FORMATS: tuple[str, ...] = tuple(READERS)
# The files a directory import reads; anything else there (READMEs, hidden files) is no trace.
TRACE_FILE_SUFFIXES = (".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz")

__all__ = ["DEFAULT_MAX_RECORD_BYTES", "DEFAULT_OUTCOME_FIELD", "FORMATS", "ImportLimits",
           "ImportOptions", "detect_format", "read_path", "trace_files"]


def read_path(path: str | Path, *, format: str = "auto", owner: str = DEFAULT_OWNER,
              contribute: bool = False, limits: ImportLimits | None = None,
              max_record_bytes: int | None = None, author: str | None = None,
              reviewer: str | None = None, skip_invalid: bool = False,
              on_skipped: Callable[[InputError], None] | None = None,
              outcome_field: str | None = DEFAULT_OUTCOME_FIELD) -> Iterator[ImportedTrace]:
    """Every trace in a file, or in each trace file of a directory (sorted by name), lazily.

    ``format`` is ``auto`` (detected per file from its content) or one of ``FORMATS``. ``limits``
    (default ``ImportLimits()``; ``max_record_bytes`` overrides its record size) bound what a file
    may hold, checked before memory is spent. Errors are InputErrors naming the file, the record
    (line or index) and the field.

    ``outcome_field``: the dotted path in each trace's metadata read as a verified outcome (None:
    none). Preference data sets: ``author`` and ``reviewer`` of the comparisons; ``skip_invalid``
    skips a record that cannot be a comparison (each refusal goes to ``on_skipped``).
    """
    if format != "auto" and format not in READERS:
        raise InputError(f"unknown format {format!r}; expected auto or one of {', '.join(FORMATS)}",
                         field="format")
    limits = limits or ImportLimits()
    if max_record_bytes is not None:
        limits = replace(limits, max_record_bytes=max_record_bytes)
    options = ImportOptions(owner=owner, contribute=contribute, limits=limits, author=author,
                            reviewer=reviewer, skip_invalid=skip_invalid, on_skipped=on_skipped,
                            outcome_field=outcome_field or None)
    return _read_files(trace_files(Path(path)), format, options)


def _read_files(files: list[Path], format: str, options: ImportOptions) -> Iterator[ImportedTrace]:
    for file in files:
        check_file_size(file, options.limits)
        name = detect_format(file, options.limits) if format == "auto" else format
        for record in READERS[name](file, options):
            yield replace(record, format=name)


def trace_files(path: Path) -> list[Path]:
    """The file itself, or a directory's trace files (by suffix, not hidden), sorted by name."""
    if path.is_dir():
        files = sorted(
            p for p in path.iterdir()
            if p.is_file() and not p.name.startswith(".")
            and p.name.lower().endswith(TRACE_FILE_SUFFIXES)
        )
        if not files:
            raise InputError(f"no trace files ({', '.join(TRACE_FILE_SUFFIXES)}) in the directory",
                             file=str(path))
        return files
    if not path.exists():
        raise InputError("no such file or directory", file=str(path))
    return [path]
