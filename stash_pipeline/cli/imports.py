"""`stash-pipeline import PATH...`: read traces and their feedback into the store."""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

from stash_pipeline import dagster_runs
from stash_pipeline.cli.output import print_json, progress
from stash_pipeline.cli.store import open_store
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.traces import DEFAULT_OWNER

SHOWN_SKIPPED = 10  # refusals printed one by one under --skip-invalid; the rest are counted


def add_parser(commands: argparse._SubParsersAction) -> None:
    from stash_pipeline.importers import DEFAULT_OUTCOME_FIELD, FORMATS

    parser = commands.add_parser(
        "import", help="import trace files or directories",
        description="Import traces (and the feedback in them) from files or directories. "
                    "The whole command is one transaction: on any error nothing is stored.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="a trace file, or a directory whose files are all imported")
    parser.add_argument("--format", default="auto", choices=("auto", *FORMATS),
                        help="source format (default: detected from each file's content)")
    parser.add_argument("--owner", default=DEFAULT_OWNER,
                        help=f"account that owns the traces (default: {DEFAULT_OWNER})")
    parser.add_argument("--contribute", action="store_true",
                        help="opt these traces in to the shared evaluator's training data")
    parser.add_argument("--outcome-field", metavar="PATH",
                        help="dotted path in each trace's metadata holding a verified outcome "
                             f"(default: {DEFAULT_OUTCOME_FIELD}, i.e. metadata."
                             f"{DEFAULT_OUTCOME_FIELD}; '' reads none); a path given that "
                             "matches no trace is reported")
    preference = parser.add_argument_group(
        "preference data sets (--format preference: hh-rlhf, TRL)")
    preference.add_argument("--author", help="who made the imported comparisons")
    preference.add_argument("--reviewer",
                            help="who reviewed them: with an --author other than the reviewer, "
                                 "they count as independently reviewed for the shared evaluator")
    preference.add_argument("--skip-invalid", action="store_true",
                            help="skip (and count) a malformed record instead of refusing the "
                                 "import (a record that holds no comparison of two replies, such "
                                 "as an empty reply, is always skipped and counted)")
    parser.add_argument("--json", action="store_true", help="end with one JSON summary line")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from stash_pipeline.importers import DEFAULT_OUTCOME_FIELD, read_path
    from stash_pipeline.services.imports import import_records

    store = open_store()
    skipped: list[InputError] = []

    def read():  # the records, read again if the import must be retried
        skipped.clear()
        records = itertools.chain.from_iterable(
            read_path(path, format=args.format, owner=args.owner, contribute=args.contribute,
                      author=args.author, reviewer=args.reviewer,
                      skip_invalid=args.skip_invalid, on_skipped=skipped.append,
                      outcome_field=outcome_field)
            for path in args.paths)
        return progress(records, desc="importing", unit=" traces")

    asked = args.outcome_field  # None: the default, read without a word when it finds nothing
    outcome_field = DEFAULT_OUTCOME_FIELD if asked is None else asked
    report = import_records(store, read, outcome_field=asked or None)
    dagster_runs.record_import(report,
                               lambda warning: print(f"warning: {warning}", file=sys.stderr))
    for warning in report.warnings():
        print(f"warning: {warning}", file=sys.stderr)
    for error in skipped[:SHOWN_SKIPPED]:
        print(f"skipped: {error}", file=sys.stderr)
    if len(skipped) > SHOWN_SKIPPED:
        print(f"skipped: ... and {len(skipped) - SHOWN_SKIPPED} more", file=sys.stderr)
    counts = {**report.as_dict(), "skipped_invalid": len(skipped), "warnings": report.warnings()}
    if args.json:
        print_json(counts)
    else:
        print(format_summary(counts, skipped_records(skipped, several_files=len(args.paths) > 1)))
    return 0


def skipped_records(skipped: list[InputError], *, several_files: bool) -> str:
    """The skipped records by place (``line 256, line 609``), the first ``SHOWN_SKIPPED``."""
    named = [f"{Path(e.file).name} {e.record}" if several_files and e.file else str(e.record)
             for e in skipped[:SHOWN_SKIPPED]]
    more = len(skipped) - len(named)
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


def format_summary(counts: dict, skipped: str = "") -> str:
    lines = [
        f"Imported {counts['traces']} traces ({counts['imported']} new, "
        f"{counts['updated']} updated, {counts.get('unchanged', 0)} unchanged): "
        f"{counts['messages']} messages, {counts['actions']} actions, "
        f"{counts['tool_calls']} tool calls.",
    ]
    if counts.get("skipped_invalid"):
        count = counts["skipped_invalid"]
        lines.append(f"Skipped {count} record{'s' if count != 1 else ''} (each reason above): "
                     f"{skipped}.")
    feedback = {k: counts.get(k, 0) for k in ("comments", "ratings", "comparisons", "outcomes",
                                                "reviews")}
    if any(feedback.values()):  # the kinds the files held
        lines.append("Feedback: " + ", ".join(f"{v} {k if v != 1 else k[:-1]}"
                                              for k, v in feedback.items() if v) + ".")
    return "\n".join(lines)
