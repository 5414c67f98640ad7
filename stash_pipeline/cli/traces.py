"""`stash-pipeline traces list|show`: what the store holds."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from stash_pipeline.cli.output import print_json, print_table, rounded
from stash_pipeline.cli.store import open_store
from stash_pipeline.cli.waiting import WAIT_HELP, run_now
from stash_pipeline.core.serialize import trace_to_dict
from stash_pipeline.core.traces import DEFAULT_OWNER

# latest_score is the newest personal whole-trace score, personal_state whether the newest
# personal model has scored this version (pending, scored); scoring_state, mean_action_credit and
# actions_scored are the shared evaluator's (the seed: shown separately).
LIST_COLUMNS = ["id", "owner", "agent", "domain", "task_id", "version", "messages", "actions",
                "contribute", "latest_score", "personal_state", "scoring_state",
                "mean_action_credit", "actions_scored"]


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
    score = sub.add_parser(
        "score", help="Score again: a fresh run of a saved checkpoint over these traces",
        description="Scores the traces with the released shared evaluator (default) or one of "
                    "your personal models (--model), without labelling calls or retraining; "
                    "--actions scores every action too. The pipeline's sensor runs the request "
                    "(`stash-pipeline dev`), or --wait runs it now.")
    score.add_argument("trace_ids", nargs="+", metavar="ID")
    score.add_argument("--model", dest="model_id", metavar="ID",
                       help="a succeeded personal model of yours instead of the release")
    score.add_argument("--actions", action="store_true", help="Score actions too")
    score.add_argument("--owner", default=DEFAULT_OWNER, help="the traces' owner")
    score.add_argument("--wait", action="store_true", help=WAIT_HELP)
    score.add_argument("--json", action="store_true", help="print one JSON object")
    score.set_defaults(handler=run_score)


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


def run_score(args: argparse.Namespace) -> int:
    from stash_pipeline.services import trace_scoring

    store = open_store()
    request = trace_scoring.request(store, args.owner, args.trace_ids, model_id=args.model_id,
                                    actions=args.actions)
    if not args.json:
        print(f"Score again requested (request {request.id}): {len(request.traces)} trace(s) "
              f"with {request.evaluator}{', actions too' if request.actions else ''}.")
    ok = True
    if args.wait:
        ok = run_now("score_again_for_traces",
                     run_keys=[trace_scoring.request_run_key(request.id)])
        if not ok:
            print(f"the scoring run of request {request.id} failed (see the Dagster run log)",
                  file=sys.stderr)
    if args.json:
        print_json(trace_scoring.request_view(request))
    return 0 if ok else 1
