"""`stash-pipeline pairs preview`: what a model would train on, without training or model calls."""

from __future__ import annotations

import argparse

from stash_pipeline.cli.output import print_json
from stash_pipeline.cli.store import open_store
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.traces import DEFAULT_OWNER
from stash_pipeline.core.training_settings import DEFAULT_MAX_PAIRS


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("pairs", help="inspect the preference pairs training would use")
    sub = parser.add_subparsers(dest="pairs_command", required=True, metavar="SUBCOMMAND")
    preview = sub.add_parser(
        "preview", help="counts of the pairs a model would train on (no training, no model call)")
    selection = preview.add_mutually_exclusive_group(required=True)
    selection.add_argument("--trace-ids", nargs="+", metavar="ID", help="these traces only")
    selection.add_argument("--all-traces", action="store_true",
                           help="every trace of --owner (with --shared: every account's)")
    preview.add_argument("--owner", help=f"whose traces, as `rm create --owner` takes them "
                                         f"(default: {DEFAULT_OWNER}; with --shared: every "
                                         "account's opted-in traces)")
    preview.add_argument("--max-pairs", type=_positive_int, default=DEFAULT_MAX_PAIRS,
                         help=f"cap on rating and feedback pairs together (default "
                              f"{DEFAULT_MAX_PAIRS})")
    preview.add_argument("--shared", action="store_true",
                         help="the shared evaluator's view: opted-in traces only, benchmark "
                              "traces set apart")
    preview.add_argument("--json", action="store_true", help="print one JSON object last")
    preview.set_defaults(handler=run_preview)


def run_preview(args: argparse.Namespace) -> int:
    from stash_pipeline.pipelines.training_pairs import training_pairs
    store = open_store()
    owner = args.owner or (None if args.shared else DEFAULT_OWNER)  # None: every account
    trace_ids = (store.trace_ids(owner=owner) if args.all_traces
                 else list(dict.fromkeys(args.trace_ids)))
    traces = store.get_traces(trace_ids)
    others = [t.id for t in traces if owner is not None and t.owner != owner]
    if others:
        raise InputError(f"trace {others[0]} is not one of {owner}'s traces (--owner names "
                         "whose traces to preview)", field="trace_ids")
    if args.shared:  # what a candidate would train on: the benchmark's traces are set apart
        from stash_pipeline.pipelines.shared_evaluator import assemble

        report = assemble(store, traces, max_pairs=args.max_pairs, extract=False).report
    else:
        report = training_pairs(traces, store.feedback_for([t.id for t in traces]),
                                max_pairs=args.max_pairs, extract=False).report
    if args.json:
        print_json(report)
    else:
        print_report(report)
    return 0


def print_report(report: dict) -> None:
    print(f"{report['audience']} audience: {report['traces']} trace(s), {report['pairs']} pair(s) "
          f"built, {report['dropped_by_max_pairs']} dropped by max_pairs={report['max_pairs']}")
    for kind, count in report["by_source"].items():
        print(f"  {kind:20} {count}")
    print(f"train {report['train_pairs']} (action {report['action_train_pairs']}, tool "
          f"{report['tool_train_pairs']}), eval {report['eval_pairs']} (action "
          f"{report['action_eval_pairs']}, tool {report['tool_eval_pairs']}), excluded cross-trace "
          f"{report['excluded_cross_trace_pairs']}")
    if report["orphaned_feedback"]:
        print(f"left out: {report['orphaned_feedback']} orphaned feedback item(s) on actions a "
              "reimport removed (`stash-pipeline feedback orphaned` lists them)")
    if "benchmark_pairs" in report:
        print(f"benchmark (kept apart): {report['benchmark_traces']} trace(s), "
              f"{report['benchmark_pairs']} pair(s); {report['training_traces']} training "
              "trace(s)")
    if report["pairs"] and not report["eval_available"]:
        print(f"evaluation unavailable: {report['eval_unavailable_reason']}")
    pending = report["pending_extraction"]
    if pending["traces"]:
        print(f"pending extraction (not run by preview): {pending['traces']} trace(s), "
              f"{pending['comment']} comment(s), {pending['correction']} later user message(s), "
              f"{pending['assessment']} action(s) to assess")
    if report["error"]:
        # Extraction may still add pairs in a real job; the preview never runs it.
        scope = " from deterministic feedback alone" if pending["traces"] else ""
        print(f"not trainable{scope}: {report['error']}")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value
