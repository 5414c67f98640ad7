"""`stash-pipeline feedback ...`: feedback intake outside trace files."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from stash_pipeline.cli.output import print_json, print_table
from stash_pipeline.cli.store import open_store
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import (
    REVIEW_STATUSES,
    Comment,
    Feedback,
    Rating,
    ReviewedComparison,
    VerifiedOutcome,
    comparison_item,
    outcome_item,
)
from stash_pipeline.core.traces import DEFAULT_OWNER, parse_action_address

TARGET_HELP = "a trace id, or an action as <trace id>/<action> (e.g. <trace id>/m4.call0)"


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "feedback", help="add comments, ratings, reviewed comparisons or verified outcomes",
        description="Add feedback to stored traces. Each call is one transaction; an unknown or "
                    "another owner's trace or action is refused and nothing is written.",
    )
    sub = parser.add_subparsers(dest="feedback_command", required=True, metavar="KIND")

    comment = sub.add_parser("comment", help="comment on a trace or an action")
    comment.add_argument("target", help=TARGET_HELP)
    comment.add_argument("text")
    comment.set_defaults(handler=run, build=lambda a: comment_of(a))

    rate = sub.add_parser("rate", help="rate traces or actions (step ratings); higher is better")
    rate.add_argument("targets", nargs="+", metavar="target",
                      help=TARGET_HELP + "; several get the same value, all or nothing")
    rate.add_argument("value", type=float)
    rate.set_defaults(handler=run, build=lambda a: ratings_of(a))

    compare = sub.add_parser(
        "compare", help="a comparison: CHOSEN beats REJECTED (pending until someone reviews it)",
        description="Record a comparison by its author. It stays pending until reviewed (`feedback "
                    "review`, or --reviewer with --status here). The shared evaluator learns only "
                    "from comparisons approved by a reviewer other than the author.")
    compare.add_argument("chosen", help=TARGET_HELP)
    compare.add_argument("rejected", help=TARGET_HELP)
    compare.add_argument("--author", required=True, help="who made the comparison")
    compare.add_argument("--reviewer", help="who reviewed it (with --status approved|rejected)")
    compare.add_argument("--status", default="pending", choices=REVIEW_STATUSES,
                         help="review status (default: pending)")
    compare.add_argument("--rationale")
    compare.set_defaults(handler=run, build=lambda a: comparison_of(a))

    review = sub.add_parser("review", help="approve (or reject) a stored comparison",
                            description="Review a comparison. Approval by its own author does not "
                                        "count as independent: the shared evaluator ignores it.")
    review.add_argument("comparison_ids", nargs="+", metavar="ID",
                        help="the comparisons' ids (several: one transaction, all or nothing)")
    review.add_argument("--reviewer", required=True, help="who reviews it")
    review.add_argument("--reject", action="store_true", help="reject instead of approving")
    review.add_argument("--version", type=int, metavar="N",
                        help="with one ID: decide only at this review version (`review next` "
                             "shows it); if someone decided since, nothing changes and the "
                             "error says its state now")
    review.set_defaults(handler=run_review)

    outcome = sub.add_parser("outcome", help="a verified task outcome (1 succeeded, 0 failed)")
    outcome.add_argument("trace_ids", nargs="+", metavar="trace_id",
                         help="one or more traces (the same outcome for each, all or nothing)")
    outcome.add_argument("reward", type=float)
    outcome.add_argument("--source", help="what checked it (e.g. tau2-bench)")
    outcome.set_defaults(handler=run, build=lambda a: outcomes_of(a))

    bulk = sub.add_parser(
        "import", help="import a feedback file (JSONL of ratings, comments, comparisons, reviews, "
                       "outcomes on stored traces)",
        description="One transaction: an error names the line and field, and nothing is stored. "
                    "The item format is in docs/importing.md (\"Feedback files\").")
    bulk.add_argument("file", type=Path, metavar="FILE")
    bulk.set_defaults(handler=run_import)

    for kind in (comment, rate, compare, review, outcome, bulk):
        kind.add_argument("--owner", default=DEFAULT_OWNER,
                          help="the account giving feedback on its traces (default: "
                               f"{DEFAULT_OWNER})")
        kind.add_argument("--json", action="store_true", help="end with one JSON line")
    for kind in (comment, rate):
        kind.add_argument("--author", help="who gave it")

    orphaned = sub.add_parser(
        "orphaned", help="list feedback on actions that a reimport removed",
        description="Feedback on an action its trace no longer has (a shorter reimport removed "
                    "it) is kept but left out of pairs; `pairs preview` counts it. Remove it with "
                    "`feedback remove`.")
    orphaned.add_argument("--owner", help="only feedback on this account's traces (default: all)")
    orphaned.add_argument("--json", action="store_true", help="print one JSON object")
    orphaned.set_defaults(handler=run_orphaned)

    remove = sub.add_parser("remove", help="remove feedback by id (all or nothing)")
    remove.add_argument("ids", nargs="+", metavar="ID", help="feedback ids (`feedback orphaned`, "
                                                             "`traces show`)")
    remove.add_argument("--owner", default=DEFAULT_OWNER,
                        help=f"the account whose traces the feedback is on (default: "
                             f"{DEFAULT_OWNER})")
    remove.add_argument("--json", action="store_true", help="end with one JSON line")
    remove.set_defaults(handler=run_remove)


def split_target(target: str) -> tuple[str, str | None]:
    """'<trace>' or '<trace>/<local action id>' -> (trace id, full action id or None)."""
    try:
        return parse_action_address(target)
    except ValueError as error:
        raise InputError(str(error), field="target") from None


def comment_of(args: argparse.Namespace) -> Comment:
    from stash_pipeline.services.feedback import comment_item
    trace_id, action_id = split_target(args.target)
    return comment_item(trace_id, args.text, action_id, args.author)


def ratings_of(args: argparse.Namespace) -> list[Rating]:
    from stash_pipeline.services.feedback import rating_item
    targets = [split_target(target) for target in dict.fromkeys(args.targets)]
    return [rating_item(trace_id, args.value, action_id, args.author)
            for trace_id, action_id in targets]


def comparison_of(args: argparse.Namespace) -> ReviewedComparison:
    if args.status != "pending" and not args.reviewer:  # named as the flag the user gives
        raise InputError(f"a comparison {args.status} needs its --reviewer", field="reviewer")
    return comparison_item(args.chosen, args.rejected, author=args.author,
                           reviewer=args.reviewer, status=args.status, rationale=args.rationale)


def outcomes_of(args: argparse.Namespace) -> list[VerifiedOutcome]:
    return [outcome_item(trace_id, args.reward, args.source)
            for trace_id in dict.fromkeys(args.trace_ids)]


def run(args: argparse.Namespace) -> int:
    built: Feedback | list[Feedback] = args.build(args)
    items = built if isinstance(built, list) else [built]
    store = open_store()
    counts = store.add_feedback(items, owner=args.owner)
    kind = type(items[0]).__name__
    if args.json:
        ids = {"id": items[0].id} if len(items) == 1 else {"ids": [i.id for i in items]}
        print_json({**ids, "kind": kind, **counts})
    else:
        print(f"Stored {kind} {', '.join(item.id for item in items)}.")
    return 0


def run_import(args: argparse.Namespace) -> int:
    from stash_pipeline.services.feedback_batch import apply, read_feedback_file

    entries = list(read_feedback_file(args.file))  # every line is checked before the store opens
    counts = apply(open_store(), args.owner, entries)
    if args.json:
        print_json({"items": len(entries), **counts})
    else:
        print(f"Stored {len(entries)} feedback item(s): "
              + ", ".join(f"{n} {kind}" for kind, n in counts.items()) + ".")
    return 0


def run_review(args: argparse.Namespace) -> int:
    store = open_store()
    status = "rejected" if args.reject else "approved"
    if len(args.comparison_ids) > 1:
        if args.version is not None:
            raise InputError("--version goes with one comparison id", field="version")
        from stash_pipeline.core.feedback import review_item
        entries = [(f"comparison {cid}", review_item(cid, args.reviewer, status))
                   for cid in dict.fromkeys(args.comparison_ids)]
        counts = store.apply_feedback(entries, owner=args.owner)
        if args.json:
            print_json({"ids": [cid for cid in dict.fromkeys(args.comparison_ids)],
                        "status": status, "reviewer": args.reviewer,
                        "reviews": counts["reviews"]})
        else:
            print(f"{counts['reviews']} comparisons {status} by {args.reviewer}.")
        return 0
    comparison, version = store.decide_comparison(
        args.comparison_ids[0], reviewer=args.reviewer, status=status, owner=args.owner,
        version=args.version)
    if args.json:
        print_json({"id": comparison.id, "status": comparison.status,
                    "reviewer": comparison.reviewer, "author": comparison.author,
                    "independently_reviewed": comparison.independently_reviewed,
                    "version": version})
    else:
        note = "" if comparison.independently_reviewed or status == "rejected" else (
            " (by its own author or without one: the shared evaluator will not learn from it)")
        print(f"Comparison {comparison.id} {status} by {args.reviewer}{note}.")
    return 0


def run_orphaned(args: argparse.Namespace) -> int:
    items = open_store().orphaned_feedback(owner=args.owner)
    rows = [{"id": f.id, "kind": type(f).__name__, **dataclasses.asdict(f)} for f in items]
    if args.json:
        print_json({"orphaned_feedback": rows, "count": len(rows)})
        return 0
    print_table([{"id": f.id, "kind": type(f).__name__, "target": _target(f)} for f in items],
                ["id", "kind", "target"])
    print(f"{len(rows)} orphaned feedback item(s)"
          + ("; remove with `stash-pipeline feedback remove ID...`" if rows else ""))
    return 0


def run_remove(args: argparse.Namespace) -> int:
    removed = open_store().remove_feedback(args.ids, owner=args.owner)
    if args.json:
        print_json({"removed": removed})
    else:
        print(f"Removed {removed} feedback item(s).")
    return 0


def _target(item: Feedback) -> str:
    if isinstance(item, ReviewedComparison):
        return f"{item.chosen_action_id or item.chosen_trace_id} > " \
               f"{item.rejected_action_id or item.rejected_trace_id}"
    return getattr(item, "action_id", None) or item.trace_id
