"""Seconds from a one-trace Score again through the API to its scores visible, with
`stash-pipeline dev` running, and where they go.

A fresh STASH_HOME (SQLite store, the packaged local instance that `stash-pipeline dev` creates);
a tiny shared release (the tests' tiny Qwen3 with a random score head, built here: nothing is
downloaded); real tau2-bench airline traces from ``--data`` imported for one account, and the
release's background scoring of them left to finish first, so the machine is idle. Then, one at a
time, ``--requests`` Score again requests for one trace each: ``POST /api/v1/traces/score`` (the
API in this process, as the viewer's button calls it), and the store polled until the trace's
whole-trace score by the release is there again (it is deleted before each request).

Each request's seconds are split by the run's own events: ``sensor`` (request to run made: the
daemon's sensor ticks), ``queue`` (run made to launched: the run queue), ``process`` (launched to
the run's process started: the interpreter and the code location's imports), ``step`` (to the
scoring step's start), ``worker`` (the step's start to the worker's first phase: a new interpreter
with torch and transformers, or the resident worker's reply), ``score`` (the worker's phases:
the checkpoint's load, the forwards), ``store`` (to the scores visible). Prints each request,
then the median and 90th percentile of each part, and last ``median_s: N``.

With ``--background N``, N more traces (the same ones under fresh ids) are imported after the
idle measurement, so the requests meet the release's background chunks queued and running: a
request waits for at most the chunk that holds the worker when it comes (a chunk's work budget,
``STASH_CHUNK_SECONDS``, bounds it), and each line says whether one held it.

    .venv/bin/python benchmarks/score_again_latency.py [--requests 20] [--traces 10]
        [--background 0]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from models import DEFAULT_DATA

POLL_S = 0.05
PARTS = ("sensor", "queue", "process", "step", "worker", "score", "store")


def configure(home: Path) -> None:
    """The environment `stash-pipeline dev` and this process share: store, scratch, instance."""
    os.environ.update({"STASH_HOME": str(home), "STASH_EXTRACTION": "off",
                       "RM_COMPUTE": "local", "DATABASE_URL": f"sqlite:///{home / 'stash.db'}"})
    for name in ("S3_BUCKET", "S3_ENDPOINT", "DAGSTER_HOME", "RM_ARTIFACT_DIR"):
        os.environ.pop(name, None)


def release_tiny(home: Path, store, texts: list[str]) -> str:
    """The tests' tiny Qwen3 with a random score head, released as "bench" (shared audience)."""
    import torch

    from stash_pipeline.core.calibration import RewardStats
    from stash_pipeline.objects import object_store_from_env
    from stash_pipeline.objects.keys import shared_evaluator_checkpoint_key
    from stash_pipeline.store import Release
    from stash_pipeline.worker import tiny_model
    from stash_pipeline.worker.checkpoint import archive, writing_checkpoint
    from stash_pipeline.worker.modeling import load_reward_model, load_tokenizer

    base = home / "base"
    tiny_model.save_tiny_base_model(base, texts, shape="tiny", context=2048)
    tokenizer = load_tokenizer(str(base))
    model = load_reward_model(str(base), device="cpu", tokenizer=tokenizer)
    torch.manual_seed(2)
    with torch.no_grad():
        model.score.weight.normal_(0.0, 1.0)
    with writing_checkpoint(home / "release" / "reward-model") as checkpoint:
        checkpoint.save_model(model, tokenizer)
        checkpoint.finish(evaluator="bench", audience="shared", base_model=str(base), metrics={},
                          reward_stats=RewardStats(mean=0.25, std=2.0, count=8),
                          action_reward_stats=RewardStats(mean=-0.5, std=0.5, count=6))
    tarball = archive(home / "release" / "reward-model", home / "release" / "reward-model.tar.gz")
    uri = object_store_from_env().put_file(shared_evaluator_checkpoint_key("bench"), tarball)
    store.save_release(Release("bench", uri, {"passed": True},
                               {"training_traces": {}, "benchmark_traces": {}}))
    return "bench"


def airline_records(data: Path, count: int, owner: str) -> list:
    from stash_pipeline.importers import read_path

    records = []
    for path in sorted((data / "tau2-bench" / "runs").glob("airline_*.json")):
        for record in read_path(path, format="tau2"):
            records.append(replace(record, trace=replace(record.trace, owner=owner),
                                   feedback=()))
            if len(records) == count:
                return records
    return records


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_dev(home: Path) -> subprocess.Popen:
    command = [str(Path(sys.executable).with_name("stash-pipeline")), "dev", "--port",
               str(free_port())]
    log = (home / "dev.log").open("w")
    return subprocess.Popen(command, env=os.environ.copy(), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def wait_idle(instance, store, release: str, timeout: float) -> None:
    """Until the release has scored every trace in the background and no run is in flight."""
    import dagster as dg

    started = time.monotonic()
    while time.monotonic() - started < timeout:
        busy = instance.get_runs(filters=dg.RunsFilter(statuses=[
            dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED,
            dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]))
        if not busy and not store.scoring_work(personal=False, evaluator=release, limit=1):
            return
        time.sleep(1.0)
    raise SystemExit(f"background scoring did not finish within {timeout:.0f} s")


def idle_cpu(dev: subprocess.Popen, seconds: float) -> float:
    """CPU seconds a minute that `stash-pipeline dev` and every process under it spend idle (the
    daemon's loops, the sensors' ticks, the webserver, the resident worker)."""
    import psutil

    def spent() -> dict[tuple[int, float], float]:
        """CPU seconds so far of each process (by pid and start time) under dev."""
        root = psutil.Process(dev.pid)
        totals = {}
        for process in [root, *root.children(recursive=True)]:
            try:
                times = process.cpu_times()
                totals[(process.pid, process.create_time())] = times.user + times.system
            except psutil.NoSuchProcess:
                pass
        return totals

    before = spent()
    time.sleep(seconds)
    after = spent()  # a process started meanwhile counts from zero; one that ended, not at all
    return sum(cpu - before.get(key, 0.0) for key, cpu in after.items()) * 60.0 / seconds


def score_row(store, trace_id: str, release: str) -> bool:
    return any(s.evaluator == release for s in store.scores_for(trace_id))


def forget_score(store, trace_id: str, release: str) -> None:
    from stash_pipeline.store import schema

    with store.transaction() as connection:
        connection.execute(schema.scores.delete().where(schema.scores.c.trace_id == trace_id,
                                                        schema.scores.c.evaluator == release))


def parts(instance, request_id: str, asked: float, visible: float) -> dict[str, float]:
    """The request's seconds split at its run's events (wall-clock timestamps)."""
    import dagster as dg

    from stash_pipeline.pipelines.trace_scoring import SCORING_REQUEST_TAG

    # A request made now is tagged with its UUID (services.scoring_requests.run_tags).
    run = instance.get_runs(filters=dg.RunsFilter(tags={SCORING_REQUEST_TAG: request_id}),
                            limit=1)[0]
    record = instance.get_run_record_by_id(run.run_id)
    marks = {"made": record.create_timestamp.timestamp()}
    for entry in instance.all_logs(run.run_id):
        event = entry.dagster_event
        kind = event.event_type_value if event else None
        if kind == "PIPELINE_STARTING":
            marks.setdefault("launched", entry.timestamp)
        elif kind == "PIPELINE_START":
            marks.setdefault("process", entry.timestamp)
        elif kind == "STEP_START":
            marks.setdefault("step", entry.timestamp)
        elif event is None and "phase" in (entry.user_message or "") and "started" in (
                entry.user_message or ""):
            marks.setdefault("worker", entry.timestamp)
        elif event is None and " done in " in (entry.user_message or ""):
            marks["scored"] = entry.timestamp
    order = [("sensor", "made"), ("queue", "launched"), ("process", "process"),
             ("step", "step"), ("worker", "worker"), ("score", "scored")]
    split, last = {}, asked
    for name, mark in order:
        if mark in marks:
            split[name] = marks[mark] - last
            last = marks[mark]
    split["store"] = visible - last
    return split


def chunk_working(instance) -> bool:
    """Whether a background chunk's run is under way now (its one step holds the worker)."""
    import dagster as dg

    from stash_pipeline.defs.scoring.sensors import BACKGROUND_TAG

    return any(BACKGROUND_TAG in run.tags for run in instance.get_runs(
        filters=dg.RunsFilter(job_name="trace_scoring", statuses=[dg.DagsterRunStatus.STARTED])))


def timed_requests(client, key: str, store, instance, records: list, release: str,
                   requests: int, timeout: float) -> tuple[list[float], list[dict[str, float]]]:
    """Score again of one trace at a time through the API, each until its score is visible."""
    headers = {"Authorization": f"Bearer {key}"}
    totals, splits = [], []
    for i in range(requests):
        trace_id = records[i % len(records)].trace.id
        forget_score(store, trace_id, release)
        behind = chunk_working(instance)
        asked = time.time()
        answer = client.post("/api/v1/traces/score", json={"trace_ids": [trace_id]},
                             headers=headers)
        answer.raise_for_status()
        while not score_row(store, trace_id, release):
            if time.time() - asked > timeout:
                raise SystemExit(f"request {i + 1} not scored within {timeout:.0f} s")
            time.sleep(POLL_S)
        visible = time.time()
        totals.append(visible - asked)
        time.sleep(1.0)  # the run's last events
        splits.append(parts(instance, answer.json()["request_id"], asked, visible))
        shown = " ".join(f"{k} {v:.1f}" for k, v in splits[-1].items())
        print(f"request {i + 1}: {totals[-1]:.1f} s ({shown})"
              + (", a background chunk held the worker when asked" if behind else ""),
              flush=True)
    return totals, splits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--traces", type=int, default=10, help="airline traces imported")
    parser.add_argument("--timeout", type=float, default=600.0, help="per request, in seconds")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary STASH_HOME (dev.log, the instance) to look at")
    parser.add_argument("--idle-s", type=float, default=30.0,
                        help="seconds over which the idle CPU is measured first")
    parser.add_argument("--background", type=int, default=0,
                        help="traces imported (fresh ids) after the idle measurement: the "
                             "requests meet background chunks queued and running")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="score-again-latency-"))
    configure(home)
    from fastapi.testclient import TestClient

    from stash_pipeline.api import create_app
    from stash_pipeline.dagster_runs.instance import get_instance
    from stash_pipeline.objects import object_store_from_env
    from stash_pipeline.services import accounts
    from stash_pipeline.store import Store

    store = Store(os.environ["DATABASE_URL"])
    store.migrate()
    account, key = accounts.create(store, "bench")
    records = airline_records(args.data, args.traces, account.id)
    if not records:
        raise SystemExit(f"no tau2-bench airline runs under {args.data}: give --data")
    texts = [m.content for r in records for m in r.trace.messages]
    release = release_tiny(home, store, texts)
    store.import_traces(records)
    dev = start_dev(home)
    try:
        instance = get_instance()
        wait_idle(instance, store, release, args.timeout)
        print(f"idle: {idle_cpu(dev, args.idle_s):.1f} CPU-s a minute for stash-pipeline dev "
              "and its processes", flush=True)
        if args.background:
            store.import_traces([replace(r, trace=replace(r.trace, id=f"{r.trace.id}-bg{i}"))
                                 for i in range(args.background)
                                 for r in [records[i % len(records)]]])
        with TestClient(create_app(store, object_store_from_env())) as client:
            totals, splits = timed_requests(client, key, store, instance, records, release,
                                            args.requests, args.timeout)
        left = len(store.scoring_work(personal=False, evaluator=release, limit=10 ** 6))
    finally:
        os.killpg(dev.pid, 2)
        dev.wait(timeout=60)
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if args.background:
        print(f"background: {args.background} traces imported, {left} still queued at the end")
    for name in PARTS:
        values = sorted(s[name] for s in splits if name in s)
        if values:
            print(f"{name:8} median {statistics.median(values):5.2f} s, "
                  f"p90 {values[int(0.9 * (len(values) - 1))]:5.2f} s")
    ordered = sorted(totals)
    print(f"total    median {statistics.median(ordered):5.2f} s, "
          f"p90 {ordered[int(0.9 * (len(ordered) - 1))]:5.2f} s, "
          f"min {ordered[0]:.2f} s, max {ordered[-1]:.2f} s")
    print(f"median_s: {statistics.median(ordered):.2f}")


if __name__ == "__main__":
    main()
