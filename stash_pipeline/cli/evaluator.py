"""`stash-pipeline evaluator ...`: the shared evaluator (train a candidate, releases, scoring)."""

from __future__ import annotations

import argparse
from typing import Any

from stash_pipeline import dagster_runs
from stash_pipeline.cli import pipeline
from stash_pipeline.cli.output import print_json, print_table, rounded
from stash_pipeline.cli.store import open_store
from stash_pipeline.cli.trust import GROUP_BY_HELP
from stash_pipeline.cli.waiting import WAIT_HELP, say, scoring_worker
from stash_pipeline.core.traces import DEFAULT_OWNER

RELEASE_COLUMNS = ["version", "created_at", "benchmark_pairs", "accuracy", "incumbent",
                   "incumbent_accuracy", "training_traces", "current"]
SLICE_COLUMNS = ["slice", "value", "pairs", "candidate", "incumbent", "candidate_high",
                 "decision"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "evaluator", help="the shared evaluator: train a candidate, list releases, score traces",
        description="The shared evaluator scores every action of every trace. Candidates train on "
                    "opted-in contributions and are released only when they pass the release "
                    "gate on the separate benchmark (docs/shared-evaluator.md).")
    sub = parser.add_subparsers(dest="evaluator_command", required=True, metavar="SUBCOMMAND")

    train = sub.add_parser("train", help="train a candidate, benchmark it, release it if it "
                                         "passes the gate")
    train.add_argument("--base-model", help="Hugging Face id or local path (default: "
                                            "STASH_SHARED_BASE_MODEL, else Qwen/Qwen3-0.6B)")
    train.add_argument("--epochs", type=int, help="passes over the training pairs (default 1)")
    train.add_argument("--wait", action="store_true", help=WAIT_HELP)
    train.set_defaults(handler=run_train)

    releases = sub.add_parser("releases", help="the releases, newest last")
    releases.set_defaults(handler=run_releases)

    score = sub.add_parser("score-pending", help="the traces the current release has not scored "
                                                 "yet; with --wait, score them now")
    score.add_argument("--wait", action="store_true",
                       help="return once the work pending now is scored (the personal models' "
                            "queued work too), telling how much is left: a running daemon "
                            "scores it in background chunks, in the queue behind people's "
                            "requests; without one the chunks run in this process")
    score.set_defaults(handler=run_score_pending)

    trust = sub.add_parser("trust", help="how far to trust a release on your traces it did not "
                                         "train on (docs/trust.md)")
    trust.add_argument("version", nargs="?", default="current",
                       help="a release version (default: current, the latest)")
    trust.add_argument("--owner", default=DEFAULT_OWNER,
                       help=f"whose traces (default: {DEFAULT_OWNER})")
    trust.add_argument("--group-by", metavar="FIELD", help=GROUP_BY_HELP)
    trust.set_defaults(handler=run_trust)

    for command in (train, releases, score, trust):
        command.add_argument("--json", action="store_true", help="end with one JSON object")


def run_train(args: argparse.Namespace) -> int:
    from stash_pipeline.core.requests import parse_shared_training_request

    wanted = parse_shared_training_request({"base_model": args.base_model, "epochs": args.epochs})
    store = open_store()
    request = store.request_shared_training(base_model=wanted.base_model, epochs=wanted.epochs)
    if not args.wait:
        if args.json:
            print_json({"request": request.id, "status": "queued"})
        else:
            print(f"Queued shared-evaluator training request {request.id}: the pipeline's sensor "
                  "starts it (stash-pipeline dev, or a deployment's daemon).")
        return 0
    [run] = dagster_runs.requested_runs("shared_training_requests",
                                        [pipeline.shared_training_run_key(request.id)],
                                        on_run=say)
    outcome = training_outcome(store, run)
    if args.json:
        print_json(outcome)
    else:
        print_outcome(outcome)
    return 0 if outcome["released"] else 1


def training_outcome(store: Any, run: Any) -> dict[str, Any]:
    """What a training run decided: released or not, why, and the benchmark report."""
    from stash_pipeline.pipelines.shared_evaluator import is_released

    candidate, failures = dagster_runs.training_run_result(run.run_id)
    comparisons = store.list_benchmark_comparisons(candidate) if candidate else []
    report = comparisons[-1].report if comparisons else None
    released = bool(candidate) and is_released(store, candidate)
    return {
        "released": released, "version": candidate if released else None,
        "candidate": candidate, "run_id": run.run_id, "status": run.status.value,
        "incumbent": report["incumbent"] if report else None,
        "reasons": report["reasons"] if report else [],
        "benchmark": {"overall": report["overall"], "slices": report["slices"]} if report
        else None,
        "error": None if released or report else "\n".join(failures) or "the run failed",
    }


def print_outcome(outcome: dict[str, Any]) -> None:
    if outcome["released"]:
        print(f"Released shared evaluator {outcome['version']}.")
    elif outcome["benchmark"]:
        print(f"Candidate {outcome['candidate']} was not released:")
        for reason in outcome["reasons"]:
            print(f"  - {reason}")
    else:
        print(f"Training failed (run {outcome['run_id']}):\n{outcome['error']}")
    if outcome["benchmark"]:
        overall = outcome["benchmark"]["overall"]
        incumbent = (f"incumbent {outcome['incumbent']} {rounded(overall['incumbent'])}"
                     if outcome["incumbent"] else "no incumbent")
        print(f"benchmark: {overall['pairs']} pairs, candidate {rounded(overall['candidate'])}, "
              f"{incumbent} ({overall['decision']})")
        rows = [{k: rounded(v) for k, v in row.items()} for row in outcome["benchmark"]["slices"]]
        if rows:
            print_table(rows, SLICE_COLUMNS)


def run_trust(args: argparse.Namespace) -> int:
    from stash_pipeline.cli.trust import print_report
    from stash_pipeline.services import trust

    report = trust.release_report(open_store(), args.owner, args.version, args.group_by)
    print_json(report) if args.json else print_report(report)
    return 0


def run_releases(args: argparse.Namespace) -> int:
    releases = open_store().list_releases()
    views = [release_view(r, current=i == len(releases) - 1) for i, r in enumerate(releases)]
    if args.json:
        print_json({"releases": views, "current": views[-1]["version"] if views else None})
        return 0
    print_table([{k: rounded(v) for k, v in view.items()} for view in views], RELEASE_COLUMNS)
    print(f"{len(views)} releases" if views else "no release yet: traces wait for the first one")
    return 0


def release_view(release: Any, *, current: bool) -> dict[str, Any]:
    overall = release.benchmark_report.get("overall") or {}
    return {
        "version": release.version, "checkpoint_uri": release.checkpoint_uri,
        "created_at": release.created_at.isoformat() if release.created_at else None,
        "benchmark_pairs": overall.get("pairs"), "accuracy": overall.get("candidate"),
        "incumbent": release.benchmark_report.get("incumbent"),
        "incumbent_accuracy": overall.get("incumbent"),
        "training_traces": len(release.data_snapshot.get("training_traces") or {}),
        "current": current,
    }


def run_score_pending(args: argparse.Namespace) -> int:
    store = open_store()
    failed = 0
    if args.wait and store.latest_release() is not None:
        # A running daemon scores it in the queue, by priority (a person's request first).
        failed = dagster_runs.background_scored(store, on_run=say)
        if failed is None:
            with scoring_worker():
                failed = dagster_runs.run_sensor_until_done("pending_scoring", on_run=say)
    counts = queue_counts(store)
    counts["failed_runs"] = failed
    if args.json:
        print_json(counts)
    elif counts["release"] is None:
        print(f"No shared evaluator release yet: {counts['waiting']} traces wait for the first.")
    else:
        print(f"Release {counts['release']}: {counts['scored']} traces scored, "
              f"{counts['pending']} pending" + (f", {failed} scoring runs failed" if failed else "")
              + ".")
    return 1 if failed else 0


def queue_counts(store: Any) -> dict[str, Any]:
    """The shared evaluator's queue: traces waiting (no release), pending and scored."""
    release = store.latest_release()
    total = len(store.trace_ids())
    if release is None:
        return {"release": None, "waiting": total, "pending": 0, "scored": 0}
    pending = len(store.traces_pending_scoring(release.version))
    return {"release": release.version, "waiting": 0, "pending": pending,
            "scored": total - pending}
