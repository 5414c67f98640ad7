"""How fast pairs are built, capped and split on the real data (AgentProcessBench + tau2-bench).

Prints each round, then medians; the last line is `name: value`.
Run: .venv/bin/python benchmarks/pair_building.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from stash_pipeline.core.pair_builders import build_feedback_pairs
from stash_pipeline.core.sampling import cap_pairs
from stash_pipeline.core.split import split_pairs
from stash_pipeline.importers import read_path
from stash_pipeline.pipelines.training_pairs import training_pairs

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    records = [*read_path(DATA / "agentprocessbench" / "hotpotqa.jsonl"),
               *read_path(DATA / "tau2-bench" / "runs")]
    traces = [r.trace for r in records]
    feedback = [f for r in records for f in r.feedback]
    build, whole = [], []
    for round_index in range(args.rounds):
        start = time.perf_counter()
        pairs = build_feedback_pairs(traces, feedback)
        capped = cap_pairs(pairs, 1000)
        split = split_pairs(capped.pairs)
        build.append(time.perf_counter() - start)
        start = time.perf_counter()
        report = training_pairs(traces, feedback, extract=False).report
        whole.append(time.perf_counter() - start)
        print(f"round {round_index}: {len(pairs)} pairs from {len(traces)} traces, build+cap+split "
              f"{build[-1]:.3f} s (train {len(split.train)}, eval {len(split.eval)}), preview "
              f"{whole[-1]:.3f} s ({report['pending_extraction']['traces']} pending traces)")
    print(f"median build+cap+split s: {statistics.median(build):.3f}")
    print(f"median preview s: {statistics.median(whole):.3f}")
    print(f"pairs_built_per_s: {len(pairs) / statistics.median(build):.0f}")


if __name__ == "__main__":
    main()
