"""What a trust report costs (docs/trust.md) against what the trace list's page costs, on SQLite.

The tau2-bench runs (../shared/data/tau2-bench/runs, with their verified outcomes) are imported
``--copies`` times for one account, and a succeeded personal model and a release score every trace
and action (seeded random rewards: the figures are not the point, the reading is). Then, ROUNDS
times each: the baseline, one page of 50 of the trace list (``Store.page_traces``: what
``/ui/traces`` and ``GET /api/v1/traces`` read); ``services.trust.report`` of the model with its
facts unchanged (read the facts, digest them, return the saved report: every page view), and
changed (compute the report and save it, whole and as figures). Prints medians with their range;
the last line is the unchanged report's median over the page's.

    .venv/bin/python benchmarks/trust_report.py [--copies 2] [--rounds 5] [--data DIR]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stash_pipeline.core.requests import parse_reward_model_request
from stash_pipeline.importers import read_path
from stash_pipeline.services import trust as trust_service
from stash_pipeline.store import ActionScore, Release, Store, TraceScore, schema

from import_throughput import with_fresh_ids

OWNER = "caller"


def timed(function, rounds: int) -> list[float]:
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        function()
        seconds.append(time.perf_counter() - started)
    return seconds


def shown(name: str, seconds: list[float]) -> float:
    median = statistics.median(seconds) * 1000
    print(f"{name}: median {median:.0f} ms (min {min(seconds) * 1000:.0f}, max "
          f"{max(seconds) * 1000:.0f})")
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared" / "data")
    args = parser.parse_args()
    records = list(read_path(args.data / "tau2-bench" / "runs", format="tau2"))
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as folder:
        store = Store(f"sqlite:///{folder}/stash.db")
        store.migrate()
        for copy in range(args.copies):
            moved = [with_fresh_ids(r, f"copy-{copy}") for r in records]
            store.import_traces([replace(r, trace=replace(r.trace, owner=OWNER)) for r in moved])
        traces = store.get_traces(store.trace_ids(owner=OWNER))
        model = store.create_reward_model(OWNER, parse_reward_model_request(
            {"name": "bench", "trace_ids": [traces[0].id]}))
        store.mark_running(model.id)
        store.mark_succeeded(
            model.id, checkpoint_uri="file:///x",
            metrics={"eval_pairs": 40, "eval_accuracy": 0.7, "max_length": 1024},
            scored={t.id: t.version for t in traces},
            scores=[TraceScore(t.id, t.version, model.id, rng.gauss(0, 1), rng.random(),
                               input_tokens=rng.randint(300, 4000)) for t in traces],
            action_scores=[ActionScore(a.id, t.id, t.version, model.id, rng.gauss(0, 1),
                                       rng.uniform(-1, 1), input_tokens=rng.randint(50, 3000))
                           for t in traces for a in t.actions()],
            untrained=[TraceScore(t.id, t.version, model.id, rng.gauss(0, 1)) for t in traces])
        store.save_release(Release("v1", "file:///r", {}, {}))
        actions = sum(len(t.actions()) for t in traces)
        print(f"{len(traces)} traces, {actions} actions, each scored by a model and a release")

        def changed() -> None:
            with store.transaction() as c:
                c.execute(schema.trust_reports.delete())
            trust_service.report(store, OWNER, model.id)

        page = shown("trace list page (50)", timed(
            lambda: store.page_traces(OWNER, shared_evaluator="v1", limit=50), args.rounds))
        shown("trust report, facts changed (computed and saved)", timed(changed, args.rounds))
        same = shown("trust report, facts unchanged (read, digested)", timed(
            lambda: trust_service.report(store, OWNER, model.id), args.rounds))
        report = trust_service.report(store, OWNER, model.id)
        print(f"{len(report['figures'])} figures on {report['traces']['considered']} traces")
        store.dispose()
    print(f"trust_report_over_trace_page: {same / page:.1f}")


if __name__ == "__main__":
    main()
