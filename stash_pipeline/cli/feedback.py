"""`stash-pipeline feedback ...`: feedback intake outside trace files."""

from __future__ import annotations

import argparse

from stash_pipeline.cli.output import print_json
from stash_pipeline.cli.store import open_store
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import (
    REVIEW_STATUSES, Comment, Feedback, Rating, ReviewedComparison, VerifiedOutcome, feedback_id,
)
from stash_pipeline.core.traces import DEFAULT_OWNER

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

    rate = sub.add_parser("rate", help="rate a trace or an action (a step rating); higher is better")
    rate.add_argument("target", help=TARGET_HELP)
    rate.add_argument("value", type=float)
    rate.set_defaults(handler=run, build=lambda a: rating_of(a))

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
    review.add_argument("comparison_id", metavar="ID", help="the comparison's id")
    review.add_argument("--reviewer", required=True, help="who reviews it")
    review.add_argument("--reject", action="store_true", help="reject instead of approving")
    review.set_defaults(handler=run_review)

    outcome = sub.add_parser("outcome", help="a verified task outcome (1 succeeded, 0 failed)")
    outcome.add_argument("trace_id")
    outcome.add_argument("reward", type=float)
    outcome.add_argument("--source", help="what checked it (e.g. tau2-bench)")
    outcome.set_defaults(handler=run, build=lambda a: outcome_of(a))

    for kind in (comment, rate, compare, review, outcome):
        kind.add_argument("--owner", default=DEFAULT_OWNER,
                          help=f"the account giving feedback on its traces (default: {DEFAULT_OWNER})")
        kind.add_argument("--json", action="store_true", help="end with one JSON line")
    for kind in (comment, rate):
        kind.add_argument("--author", help="who gave it")


def split_target(target: str) -> tuple[str, str | None]:
    """'<trace>' or '<trace>/<local action id>' -> (trace id, full action id or None)."""
    trace_id, _, local = target.partition("/")
    if not trace_id:
        raise InputError(f"{target!r} names no trace", field="target")
    return trace_id, (f"{trace_id}/{local}" if local else None)


def comment_of(args: argparse.Namespace) -> Comment:
    trace_id, action_id = split_target(args.target)
    return Comment(feedback_id("comment", trace_id, action_id, args.text, args.author),
                   trace_id, args.text, action_id=action_id, author=args.author)


def rating_of(args: argparse.Namespace) -> Rating:
    trace_id, action_id = split_target(args.target)
    # One rating per author and target: rating again replaces the earlier value.
    return Rating(feedback_id("rating", trace_id, action_id, args.author), trace_id, args.value,
                  action_id=action_id, author=args.author)


def comparison_of(args: argparse.Namespace) -> ReviewedComparison:
    chosen_trace, chosen_action = split_target(args.chosen)
    rejected_trace, rejected_action = split_target(args.rejected)
    if (chosen_action is None) != (rejected_action is None):
        raise InputError("compare two actions or two whole traces, not an action with a trace",
                         field="rejected")
    if args.status != "pending" and not args.reviewer:
        raise InputError(f"a comparison {args.status} needs its --reviewer", field="reviewer")
    # One comparison per author and sides: comparing again replaces the earlier one.
    return ReviewedComparison(
        feedback_id("comparison", args.chosen, args.rejected, args.author),
        chosen_trace, rejected_trace, chosen_action_id=chosen_action,
        rejected_action_id=rejected_action, reviewer=args.reviewer, status=args.status,
        rationale=args.rationale, author=args.author,
    )


def outcome_of(args: argparse.Namespace) -> VerifiedOutcome:
    return VerifiedOutcome(feedback_id("outcome", args.trace_id, args.source), args.trace_id,
                           args.reward, source=args.source)


def run(args: argparse.Namespace) -> int:
    item: Feedback = args.build(args)
    store = open_store()
    counts = store.add_feedback([item], owner=args.owner)
    if args.json:
        print_json({"id": item.id, "kind": type(item).__name__, **counts})
    else:
        print(f"Stored {type(item).__name__} {item.id}.")
    return 0


def run_review(args: argparse.Namespace) -> int:
    store = open_store()
    status = "rejected" if args.reject else "approved"
    comparison = store.review_comparison(args.comparison_id, reviewer=args.reviewer,
                                         status=status, owner=args.owner)
    if args.json:
        print_json({"id": comparison.id, "status": comparison.status,
                    "reviewer": comparison.reviewer, "author": comparison.author,
                    "independently_reviewed": comparison.independently_reviewed})
    else:
        note = "" if comparison.independently_reviewed or status == "rejected" else (
            " (by its own author or without one: the shared evaluator will not learn from it)")
        print(f"Comparison {comparison.id} {status} by {args.reviewer}{note}.")
    return 0
