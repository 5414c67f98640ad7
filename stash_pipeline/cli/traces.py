"""`stash-pipeline traces list|show`: what the store holds."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

from stash_pipeline import dagster_runs
from stash_pipeline.cli.output import print_json, print_table, rounded
from stash_pipeline.cli.search import add_search_options, trace_filter
from stash_pipeline.cli.store import open_store
from stash_pipeline.cli.waiting import WAIT_HELP, run_now
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import feedback_words
from stash_pipeline.core.serialize import trace_to_dict
from stash_pipeline.core.traces import DEFAULT_OWNER
from stash_pipeline.services.trace_bulk import EXPORT_FORMATS
from stash_pipeline.store.trace_pages import SORTS

# latest_score is the newest personal whole-trace score, personal_state whether the newest
# personal model has scored this version (pending, scored); scoring_state, mean_action_credit and
# actions_scored are the shared evaluator's (the seed: shown separately).
WIDE_COLUMNS = ["id", "owner", "agent", "domain", "task_id", "version", "messages", "actions",
                "contribute", "latest_score", "personal_state", "scoring_state",
                "mean_action_credit", "min_action_credit", "actions_scored", "outcome", "preview"]
# The default table fits LIST_WIDTH columns: short headings, agent and domain cut first.
LIST_COLUMNS = ["id", "agent", "domain", "credit", "scored", "latest", "state", "outcome"]
LIST_WIDTH = 100


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("traces", help="list or show stored traces")
    sub = parser.add_subparsers(dest="traces_command", required=True, metavar="SUBCOMMAND")
    listing = sub.add_parser("list", help="one line per stored trace")
    whose = listing.add_mutually_exclusive_group()
    whose.add_argument("--owner", default=DEFAULT_OWNER,
                       help=f"this account's traces (default: {DEFAULT_OWNER}, the ones "
                            "`rm create` and `traces export` take without --owner)")
    whose.add_argument("--all-accounts", action="store_true",
                       help="every account's traces, with an owner column (for operators)")
    listing.add_argument("--sort", default="-created", metavar="KEY",
                         help="created, latest_score, mean_action_credit, actions_scored, "
                              "scoring_state or outcome, ascending; --sort=-KEY or --desc for "
                              "descending (traces without the value come last). Default: "
                              "-created, the newest first")
    listing.add_argument("--desc", action="store_true", help="descending order")
    add_search_options(listing)
    listing.add_argument("--wide", action="store_true",
                         help="every column, however wide (default: fits 100 columns)")
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(handler=run_list)
    show = sub.add_parser("show", help="one trace with its messages, actions and feedback")
    show.add_argument("trace_id", metavar="ID")
    show.add_argument("--owner", help="the trace's owner (default: any account)")
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
    export = sub.add_parser(
        "export", help="write traces as JSON Lines or CSV",
        description="Every trace of --owner that matches the search (or the ids given): JSON "
                    "Lines, each a trace object in OpenAI's chat form (tool calls with "
                    "function.name and a JSON-string arguments) that `import` reads back as the "
                    "same trace, with its trace-list line under `summary`, or CSV with the "
                    "trace list's columns.")
    export.add_argument("trace_ids", nargs="*", metavar="ID", help="these traces only")
    export.add_argument("--format", choices=EXPORT_FORMATS, default="jsonl")
    export.add_argument("--output", "-o", type=Path, metavar="FILE",
                        help="write to FILE (default: standard output)")
    export.add_argument("--owner", default=DEFAULT_OWNER, help="the traces' owner")
    add_search_options(export)
    export.set_defaults(handler=run_export)


def run_list(args: argparse.Namespace) -> int:
    sort = f"-{args.sort.lstrip('-')}" if args.desc else args.sort
    if sort not in SORTS:
        raise InputError(f"--sort is one of {', '.join(k for k in SORTS if k[0] != '-')} "
                         f"(with - or --desc for descending), got {args.sort!r}", field="sort")
    store = open_store()
    owner = None if args.all_accounts else args.owner  # None: every account
    where = trace_filter(args, store, args.owner)
    rows = [dataclasses.asdict(s) for s in store.list_traces(owner=owner, sort=sort,
                                                             where=where)]
    if args.json:
        print_json({"traces": rows, "count": len(rows), "owner": owner})
    elif args.wide:
        print_table([{k: rounded(v) for k, v in row.items()} for row in rows], WIDE_COLUMNS)
        print(f"{len(rows)} traces")
    else:
        columns = (["id", "owner", *LIST_COLUMNS[1:]] if owner is None else LIST_COLUMNS)
        print_table([_short_row(row) for row in rows], columns, width=LIST_WIDTH,
                    shrink=(("agent", "domain", "owner"), ("id",)))
        order = {"-created": "newest first", "created": "oldest first"}.get(
            sort, f"by {sort.lstrip('-')}{', descending' if sort.startswith('-') else ''}")
        whose = "every account" if owner is None else owner
        print(f"{len(rows)} traces of {whose}, {order} "
              "(--sort KEY, --owner NAME or --all-accounts: others)")
        print("credit: the shared evaluator's mean action credit; latest: the newest personal "
              "score")
    return 0


def _short_row(row: dict[str, Any]) -> dict[str, Any]:
    credit = row["mean_action_credit"]
    return {"id": row["id"], "owner": row["owner"], "agent": row["agent"], "domain": row["domain"],
            "credit": None if credit is None else f"{credit:+.3f}",
            "scored": f"{row['actions_scored']}/{row['actions']}",
            "latest": rounded(row["latest_score"]), "state": row["scoring_state"],
            "outcome": rounded(row["outcome"])}


def run_show(args: argparse.Namespace) -> int:
    from stash_pipeline.services.traces import detail, owned_trace

    store = open_store()
    trace = (store.get_trace(args.trace_id) if args.owner is None
             else owned_trace(store, args.owner, args.trace_id))
    feedback = store.feedback_for([trace.id])
    scored = detail(store, trace.owner, trace.id)
    if args.json:
        payload = trace_to_dict(trace)
        payload["actions"] = [a.id for a in trace.actions()]
        payload["feedback"] = [
            {"type": type(f).__name__, **dataclasses.asdict(f)} for f in feedback
        ]
        for key in ("scores", "action_scores", "shared_evaluator"):
            payload[key] = scored[key]
        print_json(payload)
        return 0
    named = {"owner": trace.owner, "agent": trace.agent, "domain": trace.domain,
             "task": trace.task_id, "version": trace.version,
             "contribute": "yes" if trace.contribute else "no"}
    print(f"trace {trace.id}  " + "  ".join(f"{k}={v}" for k, v in named.items() if v is not None))
    names = {m.id: m.name for m in store.list_reward_models(owner=trace.owner)}
    shared = scored["shared_evaluator"]
    print(f"shared evaluator: {shared['status']}"
          + (f" (release {shared['release']})" if shared["release"] else " (no release yet)"))
    for score in scored["scores"]:
        who = (f"shared {score['evaluator']}" if score["kind"] == "shared"
               else f"personal {names.get(score['evaluator'], score['evaluator'])}")
        calibrated = score["calibrated"]
        print(f"score: {who}  raw {score['raw']:+.4f}"
              + (f"  calibrated {calibrated:.3f}" if calibrated is not None else ""))
    evaluators, credit = _credit_columns(scored["action_scores"], shared["release"])
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    for n, evaluator in enumerate(evaluators):
        kind = "shared" if evaluator == shared["release"] else "personal"
        print(f"credit column {n + 1}: {kind} {names.get(evaluator, evaluator)}")

    def credits(action_id: str | None) -> str:
        if not evaluators:
            return ""
        cells = [_credit_cell(credit.get((e, action_id)), colour) if action_id else " " * 6
                 for e in evaluators]
        return " ".join(cells) + " "

    action_ids = {(a.message_index, a.call_index): a for a in trace.actions()}
    number = len(f"[{len(trace.messages) - 1}] ")  # the widest "[i] "
    # Every line of a message starts in the text's column: after the number, the role (9), the
    # action (8) and a credit cell (7) per evaluator.
    indent = " " * (number + 10 + 9 + 7 * len(evaluators))
    for i, message in enumerate(trace.messages):
        action = action_ids.get((i, None))
        label = action.local_id if action else ""
        text = message.content if len(message.content) <= 400 else message.content[:400] + "…"
        print(f"{f'[{i}]':{number}}{message.role:9} {label:8} "
              f"{credits(action.id if action else None)}{indented(text, indent)}".rstrip())
        for k, call in enumerate(message.tool_calls):
            call_action = action_ids[(i, k)]
            print(f"{'':{number}}{'':9} {call_action.local_id:8} {credits(call_action.id)}"
                  f"-> {call.name}({json.dumps(call.arguments, ensure_ascii=False)})")
    if feedback:
        print(f"feedback ({len(feedback)}):")
    for item in feedback:
        print(f"  {indented(feedback_words(item, trace.id), '    ')}")
    return 0


def indented(text: str, indent: str) -> str:
    """``text`` with its second and later lines indented, so a multi-line message keeps to its
    column."""
    return text.replace("\n", "\n" + indent)


def _credit_columns(action_scores: list[dict[str, Any]], release: str | None
                    ) -> tuple[list[str], dict[tuple[str, str], float | None]]:
    """The evaluators with action credit on the trace (the shared release first) and each
    (evaluator, action id)'s credit."""
    credit = {(s["evaluator"], s["action_id"]): s["credit"] for s in action_scores}
    evaluators = sorted({s["evaluator"] for s in action_scores},
                        key=lambda e: (e != release, e))
    return evaluators, credit


def _credit_cell(value: float | None, colour: bool) -> str:
    """A credit as six characters (``+0.42``), green or red by sign on a terminal."""
    if value is None:
        return "     -"
    text = f"{value:+6.2f}"
    if not colour or abs(value) < 0.2:
        return text
    code = ("1;" if abs(value) >= 0.6 else "") + ("32" if value > 0 else "31")
    return f"\033[{code}m{text}\033[0m"


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
    from stash_pipeline.pipelines.trace_scoring import request_run_key
    from stash_pipeline.services import scoring_requests

    store = open_store()
    request = scoring_requests.request(store, args.owner, args.trace_ids, model_id=args.model_id,
                                    actions=args.actions)
    if not args.json:
        print(f"Score again requested (request {request.id}): {len(request.traces)} trace(s) "
              f"with {request.evaluator}{', actions too' if request.actions else ''}.")
    ok = True
    if args.wait:
        ok = run_now("score_again_for_traces",
                     run_keys=[request_run_key(request.run_ref)])
        if not ok:
            error = dagster_runs.request_state(scoring_requests.run_tags(request))["error"]
            print(f"the scoring run of request {request.id} failed: "
                  f"{error or 'see the Dagster run log'}", file=sys.stderr)
    if args.json:
        print_json({**scoring_requests.request_view(request),
                    **dagster_runs.request_state(scoring_requests.run_tags(request))})
    return 0 if ok else 1


def run_export(args: argparse.Namespace) -> int:
    from stash_pipeline.services import trace_bulk

    store = open_store()
    where = trace_filter(args, store, args.owner)
    if args.trace_ids and where is not None:
        raise InputError("give trace ids or a search, not both", field="trace_ids")
    ids = trace_bulk.select(store, args.owner, trace_ids=args.trace_ids or None, where=where)
    out = open(args.output, "w", encoding="utf-8", newline="") if args.output else sys.stdout
    try:
        for chunk in trace_bulk.export_lines(store, args.owner, ids, args.format):
            out.write(chunk)
    finally:
        if args.output:
            out.close()
    if args.output:
        print(f"{len(ids)} trace(s) written to {args.output} ({args.format}).", file=sys.stderr)
    return 0
