"""`stash-pipeline rm ...`: personal reward models (request, list, show, weights, Score again)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from stash_pipeline import dagster_runs
from stash_pipeline.cli.output import print_json, print_table
from stash_pipeline.cli.store import open_store
from stash_pipeline.cli.trust import GROUP_BY_HELP, held_out_line
from stash_pipeline.cli.waiting import WAIT_HELP, fail_abandoned_runs, run_now, say, scoring_worker
from stash_pipeline.core.failures import reason_line
from stash_pipeline.core.traces import DEFAULT_OWNER
from stash_pipeline.core.training_settings import (
    DEFAULT_BASE_MODEL,
    DEFAULT_EPOCHS,
    DEFAULT_MAX_PAIRS,
)
from stash_pipeline.core.trust import separation, separation_note, verdict_line

# How often `rm score --wait` looks again while a daemon's scoring chunks hold the queue's room.
CHUNK_POLL_S = 1.0
LIST_COLUMNS = ["id", "name", "status", "base_model", "epochs", "train_pairs", "eval_accuracy",
                "created_at"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("rm", help="personal reward models: create, list, show, weights",
                                 description="Personal reward models, trained on your own traces "
                                             "and feedback. Without --wait, the pipeline's sensor "
                                             "picks a request up (stash-pipeline dev, or a "
                                             "deployment's daemon).")
    sub = parser.add_subparsers(dest="rm_command", required=True, metavar="SUBCOMMAND")

    create = sub.add_parser("create", help="request a reward model (it is queued)")
    create.add_argument("--name", required=True, help="display name")
    selection = create.add_mutually_exclusive_group(required=True)
    selection.add_argument("--trace-ids", nargs="+", metavar="ID",
                           help="the traces that supply training pairs (yours)")
    selection.add_argument("--all-traces", action="store_true", help="every trace you own")
    create.add_argument("--base-model", default=DEFAULT_BASE_MODEL,
                        help=f"Hugging Face id or local path (default {DEFAULT_BASE_MODEL})")
    create.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS,
                        help=f"passes over the training pairs (default {DEFAULT_EPOCHS})")
    create.add_argument("--max-pairs", type=int, default=DEFAULT_MAX_PAIRS,
                        help="cap on rating and feedback pairs together (default "
                             f"{DEFAULT_MAX_PAIRS})")
    create.add_argument("--wait", action="store_true", help=WAIT_HELP)
    create.set_defaults(handler=run_create)

    listing = sub.add_parser("list", help="your reward models")
    listing.set_defaults(handler=run_list)
    show = sub.add_parser("show", help="one model: status, error, metrics")
    show.add_argument("model_id", metavar="ID")
    show.set_defaults(handler=run_show)
    weights = sub.add_parser("weights", help="a download URL of a succeeded model's checkpoint, "
                                             "valid for five minutes")
    weights.add_argument("model_id", metavar="ID")
    weights.set_defaults(handler=run_weights)
    score = sub.add_parser("score", help="Score again: rescore your traces with the saved "
                                         "checkpoint, without retraining")
    score.add_argument("model_id", metavar="ID")
    score.add_argument("--wait", action="store_true",
                       help=WAIT_HELP + "; its first chunk is the request's run, the rest of "
                       "your traces are scored in the scoring queue's bounded chunks, and it "
                       "returns once every one is scored")
    score.set_defaults(handler=run_score)
    retry = sub.add_parser("retry", help="queue a failed model again (a new attempt)")
    retry.add_argument("model_id", metavar="ID")
    retry.add_argument("--wait", action="store_true", help=WAIT_HELP)
    retry.set_defaults(handler=run_retry)
    trust = sub.add_parser("trust", help="how far to trust a succeeded model on your traces it "
                                         "did not train on (docs/trust.md)")
    trust.add_argument("model_id", metavar="ID")
    trust.add_argument("--group-by", metavar="FIELD", help=GROUP_BY_HELP)
    trust.set_defaults(handler=run_trust)

    for command in (create, listing, show, weights, score, retry, trust):
        command.add_argument("--owner", default=DEFAULT_OWNER,
                             help=f"the account (default: {DEFAULT_OWNER})")
        command.add_argument("--json", action="store_true", help="end with one JSON object")


def run_create(args: argparse.Namespace) -> int:
    from stash_pipeline.services import reward_models

    store = open_store()
    trace_ids = store.trace_ids(owner=args.owner) if args.all_traces else args.trace_ids
    if args.wait and not dagster_runs.daemon_works("queued_reward_models"):  # made here
        _refuse_without_extraction_key(store, args.owner, trace_ids, args.max_pairs)
    model = reward_models.create(store, args.owner, {
        "name": args.name, "trace_ids": trace_ids, "base_model": args.base_model,
        "epochs": args.epochs, "max_pairs": args.max_pairs})
    if not args.json:
        print(f"Queued reward model {model.id} ({model.name}) on {len(model.trace_ids)} trace(s).")
    if args.wait:
        run_now("queued_reward_models", model)
    return _report(store, args, model.id)


def _refuse_without_extraction_key(store: Any, owner: str, trace_ids: list[str],
                                   max_pairs: int) -> None:
    """With --wait and no daemon the run is made here, with this environment: a selection whose
    comments (or messages to assess) need the extraction model while no key is set is refused
    before anything is queued, rather than failing after the base model has loaded. Otherwise
    the pipeline's environment decides (a deployment's worker may hold the key)."""
    from stash_pipeline.extraction.config import ExtractionConfig

    config = ExtractionConfig.from_env()
    if not config.enabled or config.api_key:
        return
    from stash_pipeline.extraction.errors import MissingApiKeyError
    from stash_pipeline.pipelines.training_pairs import training_pairs

    mine = list(store.owned_versions(list(dict.fromkeys(trace_ids)), owner))  # the rest: create's
    traces = store.get_traces(mine)
    report = training_pairs(traces, store.feedback_for(mine), max_pairs=max_pairs,
                            extract=False, config=config).report
    if report["pending_extraction"]["traces"]:
        raise MissingApiKeyError(report["pending_extraction"]["traces"])


def run_list(args: argparse.Namespace) -> int:
    from stash_pipeline.services import reward_models

    views = [reward_models.view(m) for m in reward_models.list_models(open_store(), args.owner)]
    if args.json:
        print_json({"reward_models": views, "count": len(views)})
        return 0
    rows = [{**v, **{k: (v["metrics"] or {}).get(k) for k in ("train_pairs", "eval_accuracy")}}
            for v in views]
    print_table(rows, LIST_COLUMNS)
    print(f"{len(rows)} reward models")
    return 0


def run_show(args: argparse.Namespace) -> int:
    fail_abandoned_runs()
    return _report(open_store(), args, args.model_id)


def run_weights(args: argparse.Namespace) -> int:
    from stash_pipeline.objects import object_store_from_env
    from stash_pipeline.services import reward_models

    url = reward_models.weights_url(open_store(), object_store_from_env(), args.owner,
                                    args.model_id)
    print_json({"url": url}) if args.json else print(url)
    return 0


def run_trust(args: argparse.Namespace) -> int:
    from stash_pipeline.cli.trust import print_report
    from stash_pipeline.services import trust

    report = trust.model_report(open_store(), args.owner, args.model_id, args.group_by)
    print_json(report) if args.json else print_report(report)
    return 0


def run_score(args: argparse.Namespace) -> int:
    return _request_run(args, "score_again", "score_again_requests",
                        lambda m: f"Score again requested for {m.id} (request "
                                  f"{m.score_generation}).")


def run_retry(args: argparse.Namespace) -> int:
    return _request_run(args, "retry", "queued_reward_models",
                        lambda m: f"Queued reward model {m.id} again (attempt {m.attempt}).")


def _request_run(args: argparse.Namespace, operation: str, sensor: str, said: Any) -> int:
    """Score again or retry: record the request, say so, and with --wait run it now."""
    from stash_pipeline.services import reward_models

    store = open_store()
    fail_abandoned_runs()  # a model whose `--wait` command was killed can be retried at once
    model = getattr(reward_models, operation)(store, args.owner, args.model_id)
    if not args.json:
        print(said(model))
    if args.wait and operation == "score_again":  # a scoring run: not the model's partition
        if run_now(sensor, run_keys=[reward_models.score_again_run_key(model)]):
            score_queued_chunks(store, model.id)
    elif args.wait:
        run_now(sensor, model)
    return _report(store, args, model.id)


def score_queued_chunks(store: Any, model_id: str) -> bool:
    """`rm score --wait` after the request's run (its first chunk): until none of the owner's
    traces is queued for the model, the daemon's bounded chunks waited for where a daemon works
    the queue (in the run queue by priority, with everything else), else run here a tick at a
    time as the daemon would hand them out (other queued work first where it is older), on one
    resident worker. False when a chunk failed or nothing works the queue."""
    if dagster_runs.model_chunks_scored(store, model_id, on_run=say):
        return False  # a chunk of the model's failed
    left = store.score_again_queued(model_id)
    if not left:  # none, or the daemon scored them all: no worker to start
        return True
    with scoring_worker():
        while left:
            say(f"{left} of your traces still queued for {model_id}: scoring them in bounded "
                "chunks")
            runs = dagster_runs.run_sensor("pending_scoring", on_run=say)
            if any(not run.is_success for run in runs):
                return False
            if not runs and not dagster_runs.scoring_chunks_in_flight():
                say(f"{left} of your traces stay queued for {model_id}: no scoring chunk can "
                    "take them now")
                return False
            if not runs:  # another command's chunks hold the queue's room: wait for them
                time.sleep(CHUNK_POLL_S)
            left = store.score_again_queued(model_id)
    return True


def _report(store: Any, args: argparse.Namespace, model_id: str) -> int:
    """The model as JSON (last line) or text; exit status 1 for a failed model."""
    from stash_pipeline.services import reward_models

    model = reward_models.get(store, args.owner, model_id)
    view = {**reward_models.view(model), **dagster_runs.model_queue_fields(
        model, store.score_again_queued(model.id) if model.score_generation else 0)}
    if model.status == "running" and model.run_id:
        # The newest progress line.
        view["progress"] = dagster_runs.run_progress(model.run_id).worker.line
    verdict = None
    if model.status == "succeeded":  # what it may claim, wherever it is shown (docs/trust.md)
        from stash_pipeline.services import trust
        verdict = view["trust_verdict"] = trust.model_verdict(store, args.owner, model_id)
    if args.json:
        print_json(view)
    else:
        print(f"{view['id']}  {view['name']}  {view['status']}  attempt {view['attempt']}")
        if view.get("progress"):
            print(f"progress: {view['progress']}")
        if view["wait"]:
            print(view["wait"]["text"])
        if verdict is not None:
            print(verdict_line(verdict))
        again = view["score_again"]
        if again and again["status"] != "succeeded":
            print(f"score again (request {again['request']}): {again['status']}"
                  + (f", {again['wait']['text']}" if again["wait"] else "")
                  + (f", {again['queued_traces']} of your traces still queued for it"
                     if again["queued_traces"] else "")
                  + (f": {reason_line(again['error'])}" if again["error"] else ""))
        if view["error"]:
            print(f"reason: {reason_line(view['error'])}")
        for name, value in (view["metrics"] or {}).items():
            if name == "eval_accuracy" and view["held_out"]:
                value = held_out_line(view["held_out"])  # never a bare 1.0 on three pairs
            # rm trust shows the slices with their intervals; None has nothing to say
            # (eval_unavailable_reason when evaluation ran).
            if name != "eval_slices" and value is not None:
                print(f"  {name:28} {_shown(value)}")
        if view["error"]:
            print(f"error:\n{view['error']}")
        _print_extremes(store, model_id, verdict)
        if view["status"] == "succeeded":
            print(f"how far to trust it on your other traces: stash-pipeline rm trust "
                  f"{model_id}")
    return 1 if view["status"] == "failed" else 0


def _print_extremes(store: Any, model_id: str, verdict: dict[str, Any] | None,
                    count: int = 3) -> None:
    """The model's highest- and lowest-scored traces: where to look first."""
    scores = store.scores_of_evaluator(model_id)
    if not scores:
        return
    rows = [{"rank": rank, "trace": s.trace_id, "raw": f"{s.raw:+.4f}",
             "calibrated": f"{s.calibrated:.3f}" if s.calibrated is not None else None}
            for rank, s in enumerate(scores, 1)]
    print(f"top and bottom of {len(scores)} scored traces (raw reward; compare within this model):")
    print_table(rows[:count] + rows[max(count, len(rows) - count):], ["rank", "trace", "raw",
                                                                       "calibrated"])
    note = separation_note(separation([s.raw for s in scores]), "scores", verdict)
    if note:
        print(note)


def _shown(value: Any) -> str:
    """A metric for people: floats to four digits, the phases' seconds as `name 0.12 s` pairs."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):  # the loss curve: its length and ends (the viewer plots it)
        return (f"{len(value)} points, {value[0]:.4g} to {value[-1]:.4g}" if value
                and all(isinstance(v, float) for v in value) else str(value))
    if isinstance(value, dict):
        return ", ".join(f"{k} {v:.2f} s" if isinstance(v, float) else f"{k} {v}"
                         for k, v in value.items())
    return str(value)
