"""`stash-pipeline score FILE --model ID|release [--candidates]`: rewards of unsaved input."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from stash_pipeline.cli.output import print_json, print_table, progress, rounded
from stash_pipeline.core.traces import DEFAULT_OWNER

CHUNK = 16  # conversations read together


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "score", help="score conversations or rank candidate replies with a model, now",
        description="Score what a file holds without storing it, as the API's /rewards routes "
                    "do: every conversation of FILE (any import format) with its whole-trace "
                    "raw reward, calibrated score and every action's reward and credit; or, with "
                    "--candidates, FILE's one JSON object {\"context\": CONVERSATION, "
                    "\"candidates\": [MESSAGE, ...]}, each candidate ranked by the reward of the "
                    "conversation it completes. The model is loaded in this process.")
    parser.add_argument("file", metavar="FILE")
    parser.add_argument("--model", required=True, metavar="ID|release",
                        help="one of your succeeded personal models, or release: the current "
                             "shared-evaluator release")
    parser.add_argument("--candidates", action="store_true",
                        help="FILE holds a context and candidate next messages to rank")
    parser.add_argument("--format", default="auto", help="FILE's import format (default auto)")
    parser.add_argument("--owner", default=DEFAULT_OWNER, help="whose models --model names")
    parser.add_argument("--device", choices=("cpu", "cuda", "mps"),
                        help="default: cuda, mps or cpu, whichever there is")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from stash_pipeline.cli.store import open_store
    from stash_pipeline.objects import object_store_from_env
    from stash_pipeline.pipelines.trace_scoring import scorer_of
    from stash_pipeline.services import rewards
    from stash_pipeline.serving.models import download_and_load
    from stash_pipeline.worker.threads import use_cpu_threads

    use_cpu_threads()  # before anything loads torch (docs/worker.md, "CPU threads")
    requests = list(rewards.read_file(args.file, candidates=args.candidates, format=args.format))
    store = open_store()
    evaluator = rewards.evaluator(store, args.owner, args.model)
    chosen = scorer_of(store, evaluator)
    print(f"loading {evaluator}", file=sys.stderr)
    loaded = download_and_load(object_store_from_env(), chosen.checkpoint_uri,
                               device=args.device)
    from stash_pipeline.worker.rewards import score_requests

    answers: list[dict[str, Any]] = []
    chunks = [requests[i:i + CHUNK] for i in range(0, len(requests), CHUNK)]
    for chunk in progress(chunks, desc="scoring", unit="chunk"):
        answers += score_requests(loaded, chunk)
    kind = "shared" if chosen.shared else "personal"
    if args.candidates:
        result = {"evaluator": evaluator, "kind": kind, **answers[0]}
        if args.json:
            print_json(result)
        else:
            print_candidates(result)
        return 0
    for request, answer in zip(requests, answers):
        answer["trace_id"] = request.trace.id
    result = {"evaluator": evaluator, "kind": kind, "conversations": answers}
    if args.json:
        print_json(result)
    else:
        print_conversations(result)
    return 0


def print_conversations(result: dict[str, Any]) -> None:
    for answer in result["conversations"]:
        print(f"{answer['trace_id']}: raw {rounded(answer['raw'])}, calibrated "
              f"{rounded(answer['calibrated'])} ({result['evaluator']})")
        if answer["actions"]:
            print_table([{k: rounded(v) for k, v in a.items()} for a in answer["actions"]],
                        ["action_id", "tool_call", "raw", "credit"])
        print()


def print_candidates(result: dict[str, Any]) -> None:
    rows = []
    for index in result["ranking"]:
        candidate = result["candidates"][index]
        credits = ", ".join("" if a["credit"] is None else rounded(a["credit"])
                            for a in candidate["actions"])
        rows.append({"rank": candidate["rank"], "candidate": index,
                     "raw": rounded(candidate["raw"]),
                     "calibrated": rounded(candidate["calibrated"]), "credits": credits})
    print(f"{len(rows)} candidates ranked by {result['evaluator']}:")
    print_table(rows, ["rank", "candidate", "raw", "calibrated", "credits"])
