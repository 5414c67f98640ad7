"""`stash-pipeline review ...`: the review queue (docs/viewer.md, "The review queue") from the
command line: the next item, the queue in order, marking items done or skipped, assigning them."""

from __future__ import annotations

import argparse

from stash_pipeline.cli.output import print_json, print_table, rounded
from stash_pipeline.cli.search import add_search_options, trace_filter
from stash_pipeline.cli.store import open_store
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.traces import DEFAULT_OWNER

LIST_COLUMNS = ["n", "kind", "id", "reason", "shared", "personal", "assignee", "preview"]
LIST_WIDTH = 100


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "review", help="the review queue: what to look at next, and marking it reviewed",
        description="The owner's traces nobody has reviewed yet and the comparisons others filed "
                    "on them, most uncertain first: comparisons waiting for review, the release "
                    "and the newest personal model disagreeing, a verdict contradicting a "
                    "verified outcome, credit near the reference, then by score (docs/viewer.md).")
    sub = parser.add_subparsers(dest="review_command", required=True, metavar="SUBCOMMAND")
    shown = []
    for name, helptext in (("next", "the next item to review, with the action to look at first"),
                           ("list", "the queue in order, with why each item is there")):
        command = sub.add_parser(name, help=helptext)
        command.add_argument("--model", metavar="ID",
                             help="the personal model whose verdict the order reads (default: "
                                  "your newest succeeded one)")
        command.add_argument("--kind", choices=("trace", "comparison"),
                             help="only traces, or only comparisons")
        who = command.add_mutually_exclusive_group()
        who.add_argument("--assignee", metavar="NAME", help="only items assigned to NAME")
        who.add_argument("--unassigned", action="store_true", help="only unassigned items")
        add_search_options(command)
        shown.append(command)
    shown[0].set_defaults(handler=run_next)
    shown[1].add_argument("--limit", type=int, default=50, help="items shown (default 50)")
    shown[1].add_argument("--offset", type=int, default=0, help="skip this many first")
    shown[1].set_defaults(handler=run_list)
    changes = []
    for name, helptext in (("done", "mark items reviewed (a trace: at its current version)"),
                           ("skip", "skip items: they go to the end of the queue"),
                           ("reopen", "put items back in the queue as they were")):
        command = sub.add_parser(name, help=helptext)
        changes.append(command)
        command.set_defaults(handler=run_status, status={"done": "reviewed", "skip": "skipped",
                                                         "reopen": "pending"}[name])
    assign = sub.add_parser("assign", help="assign items to a reviewer")
    target = assign.add_mutually_exclusive_group(required=True)
    target.add_argument("--to", metavar="NAME", help="the reviewer")
    target.add_argument("--nobody", action="store_true", help="unassign them")
    assign.set_defaults(handler=run_assign)
    changes.append(assign)
    for command in changes:
        command.add_argument("ids", nargs="+", metavar="ID",
                             help="trace ids, or comparison ids with --comparisons (all or "
                                  "nothing)")
        command.add_argument("--comparisons", action="store_true",
                             help="the ids are comparisons' ids")
        command.add_argument("--version", type=int, metavar="N",
                             help="with one ID: change it only at this review version (`review "
                                  "next` and `review list --json` show it); if someone changed "
                                  "it since, nothing changes and the error says its state now")
    for command in (*shown, *changes):
        command.add_argument("--owner", default=DEFAULT_OWNER,
                             help=f"the account whose queue it is (default: {DEFAULT_OWNER})")
        command.add_argument("--reviewer", metavar="NAME",
                             help="who reviews (default: the owner): comparisons they authored "
                                  "are not theirs to review")
        command.add_argument("--json", action="store_true", help="print one JSON object")


def _scope(args: argparse.Namespace, store):
    from stash_pipeline.services import review

    return review.scope(store, args.owner, reviewer=args.reviewer or args.owner,
                        where=trace_filter(args, store, args.owner), model_id=args.model,
                        assignee=args.assignee, unassigned=args.unassigned, kind=args.kind)


def _progress(page: dict) -> str:
    return f"reviewed {page['reviewed']} of {page['total']}, {page['pending']} left"


def run_next(args: argparse.Namespace) -> int:
    from stash_pipeline.services import review

    store = open_store()
    found = review.next_item(store, _scope(args, store))
    if args.json:
        print_json(found)
        return 0
    item = found["item"]
    if item is None:
        print(f"Nothing left to review ({_progress(found)}).")
        return 0
    print(f"{_progress(found)}.")
    if item["kind"] == "comparison":
        print(f"comparison {item['id']} by {item.get('author') or 'an unknown author'}: "
              f"{item.get('chosen_action_id') or item['chosen_trace_id']} over "
              f"{item.get('rejected_action_id') or item['rejected_trace_id']}")
        if item.get("rationale"):
            print(f"why: {item['rationale']}")
        print(f"review it: stash-pipeline feedback review {item['id']} --reviewer NAME "
              f"--version {item['version']} [--reject]")
        return 0
    print(f"trace {item['id']}: {item['reason_text']}")
    for label, key in (("release's mean credit", "shared_credit"),
                       ("personal verdict", "personal_verdict")):
        if item[key] is not None:
            print(f"  {label}: {item[key]:+.3f}")
    if item["outcome_succeeded"] is not None:
        print(f"  verified outcome: {'succeeded' if item['outcome_succeeded'] else 'failed'}")
    if item["preview"]:
        print(f"  first user message: {item['preview']}")
    if item.get("focus_action"):
        print(f"  look first at: {item['focus_action']}")
    print(f"show it: stash-pipeline traces show {item['id']}; then comment on it "
          f"(feedback comment) or: stash-pipeline review done {item['id']} "
          f"--version {item['version']}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from stash_pipeline.services import review

    store = open_store()
    page = review.queue(store, _scope(args, store), limit=args.limit, offset=args.offset)
    if args.json:
        print_json(page)
        return 0
    rows = [{"n": args.offset + n + 1, "kind": item["kind"], "id": item["id"],
             "reason": item["reason"], "shared": rounded(item.get("shared_credit")),
             "personal": rounded(item.get("personal_verdict")),
             "assignee": item["assignee"], "preview": item["preview"]}
            for n, item in enumerate(page["items"])]
    print_table(rows, LIST_COLUMNS, width=LIST_WIDTH, shrink=(("preview",), ("assignee",)))
    print(f"{_progress(page)} (shared: the release's mean action credit; personal: your "
          "model's verdict, -1 to +1)")
    if page["model_set_aside"]:
        print(page["model_set_aside"])
    print("what your review becomes:")
    for action in page["yields"]["actions"]:
        print(f"- {action['action']}: {action['text']} ({action['so_far']} of yours so far)")
    return 0


def _items(args: argparse.Namespace) -> list[tuple[str, str]]:
    kind = "comparison" if args.comparisons else "trace"
    return [(kind, item_id) for item_id in args.ids]


def _expected(args: argparse.Namespace) -> dict[tuple[str, str], int] | None:
    """--version, for the one item named."""
    if args.version is None:
        return None
    if len(args.ids) != 1:
        raise InputError("--version goes with one ID", field="version")
    return {_items(args)[0]: args.version}


def run_status(args: argparse.Namespace) -> int:
    from stash_pipeline.services import review

    versions = review.set_status(open_store(), args.owner, _items(args), args.status,
                                 reviewer=args.reviewer or args.owner, expected=_expected(args))
    count = len(versions)
    if args.json:
        print_json({"items": count, "status": args.status, "versions": versions})
    else:
        said = {"reviewed": "reviewed", "skipped": "skipped", "pending": "back in the queue"}
        print(f"{count} item(s) {said[args.status]}.")
    return 0


def run_assign(args: argparse.Namespace) -> int:
    from stash_pipeline.services import review

    assignee = None if args.nobody else args.to
    versions = review.assign(open_store(), args.owner, _items(args), assignee,
                             expected=_expected(args))
    count = len(versions)
    if args.json:
        print_json({"items": count, "assignee": assignee, "versions": versions})
    else:
        print(f"{count} item(s) assigned to {assignee}." if assignee
              else f"{count} item(s) unassigned.")
    return 0
