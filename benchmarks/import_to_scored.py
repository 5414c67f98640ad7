"""Seconds from `import` to action scores visible, with the scoring sensor running.

A fresh local instance (the packaged dagster_local.yaml, as `stash-pipeline dev` uses) and a SQLite
store under a temporary STASH_HOME; a tiny shared evaluator (tiny random Qwen3, trained on the
packaged samples' step ratings) released in it; `dagster-daemon run` on the project's definitions,
so the `pending_scoring` sensor ticks and launches runs as in a deployment. Then, one at a
time, a sample trace is imported under a fresh id and the store is polled until its action scores
are there. The baseline is the sensor's minimum interval: the wait a trace can have before the
sensor even looks. Prints each import's seconds, the interval, and last ``median_s: N`` over the
imports.

    .venv/bin/python benchmarks/import_to_scored.py [--imports 20] [--timeout 600]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "stash_pipeline"
SAMPLES = sorted((PACKAGE / "samples").glob("*.jsonl"))
POLL_S = 0.2


def configure(home: Path) -> dict[str, str]:
    """The environment every process here shares: the store, scratch and the instance."""
    env = {"STASH_HOME": str(home / "stash"), "DATABASE_URL": f"sqlite:///{home / 'stash.db'}",
           "RM_ARTIFACT_DIR": str(home / "jobs"), "DAGSTER_HOME": str(home / "dagster"),
           "STASH_EXTRACTION": "off", "RM_COMPUTE": "local"}
    os.environ.update(env)
    for name in ("S3_BUCKET", "S3_ENDPOINT"):
        os.environ.pop(name, None)
    (home / "dagster").mkdir(parents=True)
    shutil.copyfile(PACKAGE / "dagster_local.yaml", home / "dagster" / "dagster.yaml")
    return env


def sample_records() -> list:
    from stash_pipeline.importers import read_path

    return [record for path in SAMPLES for record in read_path(path)]


def release_tiny_evaluator(home: Path, store) -> str:  # store: stash_pipeline.store.Store
    """Train a tiny shared checkpoint on the samples' step ratings and release it as "bench"."""
    from stash_pipeline.compute.contract import ARCHIVE_NAME, JobSettings, write_job
    from stash_pipeline.compute.worker_log import failure_reason
    from stash_pipeline.core.pair_builders import build_feedback_pairs
    from stash_pipeline.objects import object_store_from_env
    from stash_pipeline.objects.keys import shared_evaluator_checkpoint_key
    from stash_pipeline.store import Release
    from stash_pipeline.worker.tiny_model import save_tiny_base_model

    records = sample_records()
    texts = [line for path in SAMPLES for line in path.read_text().splitlines() if line.strip()]
    base = save_tiny_base_model(home / "base", texts)
    pairs = build_feedback_pairs([replace(r.trace, contribute=True) for r in records],
                                 [f for r in records for f in r.feedback], "shared")
    job_dir = home / "release-job"
    write_job(job_dir, JobSettings(evaluator="bench", audience="shared", base_model=str(base),
                                   outputs=("checkpoint",)), train_pairs=pairs)
    done = subprocess.run([sys.executable, "-m", "stash_pipeline.worker", str(job_dir)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"training the tiny evaluator failed:\n{failure_reason(job_dir)}")
    uri = object_store_from_env().put_file(shared_evaluator_checkpoint_key("bench"),
                                           job_dir / ARCHIVE_NAME)
    store.save_release(Release("bench", uri, {"passed": True},
                               {"training_traces": {}, "benchmark_traces": {}}))
    return "bench"


def start_daemon(home: Path) -> subprocess.Popen:
    log = (home / "daemon.log").open("w")
    daemon = Path(sys.executable).with_name("dagster-daemon")
    return subprocess.Popen([str(daemon), "run", "-m", "stash_pipeline.definitions"],
                            env=os.environ.copy(), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def seconds_to_scored(store, release: str, record, timeout: float) -> float:
    """Import one trace under a fresh id; seconds until the release's action scores are stored."""
    trace = replace(record.trace, id=str(uuid.uuid4()))
    started = time.perf_counter()
    store.import_traces([replace(record, trace=trace, feedback=())])
    while time.perf_counter() - started < timeout:
        if store.action_scores_for(trace.id, release):
            return time.perf_counter() - started
        time.sleep(POLL_S)
    raise SystemExit(f"trace {trace.id} was not scored within {timeout:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--imports", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=600.0, help="per import, in seconds")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="import-to-scored-"))
    configure(home)
    from stash_pipeline.defs.scoring.sensors import INTERVAL_S as SCORING_INTERVAL_S
    from stash_pipeline.store import Store

    store = Store(os.environ["DATABASE_URL"])
    store.migrate()
    release = release_tiny_evaluator(home, store)
    records = [r for r in sample_records() if r.trace.actions()]
    daemon = start_daemon(home)
    try:
        seconds = []
        for i in range(args.imports):
            seconds.append(seconds_to_scored(store, release, records[i % len(records)],
                                             args.timeout))
            print(f"import {i + 1}: scored after {seconds[-1]:.1f} s", flush=True)
    finally:
        os.killpg(daemon.pid, 15)
        daemon.wait(timeout=60)
    print(f"sensor_interval_s: {SCORING_INTERVAL_S}")
    print(f"mean_s: {statistics.fmean(seconds):.1f}")
    print(f"median_s: {statistics.median(seconds):.1f}")


if __name__ == "__main__":
    main()
