"""`stash-pipeline traces list|show`: what the store holds."""

from __future__ import annotations

import argparse
import dataclasses

from stash_pipeline.cli.output import print_json, print_table, rounded
from stash_pipeline.cli.store import open_store
from stash_pipeline.core.serialize import trace_to_dict
from stash_pipeline.core.traces import DEFAULT_OWNER

# latest_score is the newest personal whole-trace score; scoring_state, mean_action_credit and
# actions_scored are the shared evaluator's (the seed: shown separately).
LIST_COLUMNS = ["id", "owner", "agent", "domain", "task_id", "version", "messages", "actions",
                "contribute", "latest_score", "scoring_state", "mean_action_credit",
                "actions_scored"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("traces", help="list or show stored traces")
    sub = parser.add_subparsers(dest="traces_command", required=True, metavar="SUBCOMMAND")
    listing = sub.add_parser("list", help="one line per stored trace")
    listing.add_argument("--owner", help="only this account's traces")
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(handler=run_list)
    show = sub.add_parser("show", help="one trace with its messages, actions and feedback")
    show.add_argument("trace_id", metavar="ID")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(handler=run_show)
    contribute = sub.add_parser(
        "contribute", help="opt a trace in to (or, with --off, out of) shared-evaluator training",
        description="Opting out excludes the trace's feedback from future shared candidates; it "
                    "cannot remove what previously released weights have learned.",
    )
    which = contribute.add_mutually_exclusive_group(required=True)
    which.add_argument("trace_ids", nargs="*", default=[], metavar="ID",
                       help="the traces (all or nothing: an unknown id changes none)")
    which.add_argument("--all", action="store_true", help="every trace of --owner")
    contribute.add_argument("--off", action="store_true", help="opt out instead")
    contribute.add_argument("--owner", default=DEFAULT_OWNER, help="the traces' owner")
    contribute.set_defaults(handler=run_contribute)


def run_list(args: argparse.Namespace) -> int:
    store = open_store()
    rows = [dataclasses.asdict(s) for s in store.list_traces(owner=args.owner)]
    if args.json:
        print_json({"traces": rows, "count": len(rows)})
    else:
        shown = [{k: rounded(v) for k, v in row.items()} for row in rows]
        print_table(shown, [c for c in LIST_COLUMNS if not rows or c in rows[0]])
        print(f"{len(rows)} traces")
    return 0


def run_show(args: argparse.Namespace) -> int:
    store = open_store()
    trace = store.get_trace(args.trace_id)
    feedback = store.feedback_for([trace.id])
    if args.json:
        payload = trace_to_dict(trace)
        payload["actions"] = [a.id for a in trace.actions()]
        payload["feedback"] = [
            {"type": type(f).__name__, **dataclasses.asdict(f)} for f in feedback
        ]
        print_json(payload)
        return 0
    print(f"trace {trace.id}  owner={trace.owner}  agent={trace.agent}  domain={trace.domain}  "
          f"task={trace.task_id}  version={trace.version}  contribute={trace.contribute}")
    action_ids = {(a.message_index, a.call_index): a.local_id for a in trace.actions()}
    for i, message in enumerate(trace.messages):
        label = action_ids.get((i, None), "")
        text = message.content if len(message.content) <= 400 else message.content[:400] + "…"
        print(f"[{i}] {message.role:9} {label:8} {text}".rstrip())
        for k, call in enumerate(message.tool_calls):
            print(f"    {'':9} {action_ids[(i, k)]:8} -> {call.name}({call.arguments})")
    for item in feedback:
        print(f"feedback: {type(item).__name__} {dataclasses.asdict(item)}")
    return 0


def run_contribute(args: argparse.Namespace) -> int:
    store = open_store()
    ids = store.trace_ids(owner=args.owner) if args.all else args.trace_ids
    if len(ids) == 1 and not args.all:
        store.set_contribute(ids[0], not args.off, args.owner)
        print(f"Trace {ids[0]} {'no longer contributes' if args.off else 'contributes'} "
              "to shared-evaluator training.")
        return 0
    changed = store.set_contribute_many(ids, not args.off, args.owner)
    print(f"{changed} trace(s) of {args.owner} "
          f"{'no longer contribute' if args.off else 'contribute'} to shared-evaluator training.")
    return 0
