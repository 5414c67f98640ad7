"""Sensor ticks at scale (issue 43): every sensor that reads the store, one tick each, on a
PostgreSQL store of ``--users`` users (default 100,000), each with ``--traces-per-user`` traces
(default 10: 1,000,000 traces) and one succeeded personal model that has scored them, plus 1,000
queued models, 10,000 Score again requests, 10,000 requests to score chosen traces, 10,000 shared
training requests, a release that has scored every trace, and ``--pending`` (default 1%) of the
traces waiting for their owner's model and for the release.

The store is built with generate_series in a fresh database (stash_bench_sensors_<random>, dropped
afterwards unless ``--keep``), then each sensor's tick runs ``--rounds`` times (default 3) against
a test Dagster instance, as the daemon runs it (the real definitions, their resources, the first
tick from no cursor). Prints each sensor's seconds (first tick and the slowest), the build's
seconds per table, and last ``slowest_tick_s: X`` (Dagster warns at 60 s; the aim is 5 s).

    .venv/bin/python benchmarks/sensor_ticks.py [--users 100000] [--traces-per-user 10] \
        [--server postgresql+psycopg://postgres@127.0.0.1:5432] [--rounds 3] [--keep]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

# The repository root, for the store suite's bulk fill (stash_pipeline_tests.support).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stash_pipeline_tests.support.bulk_store_helpers import fill

SENSORS = ("queued_reward_models", "score_again_requests", "score_again_for_traces",
           "pending_personal_scoring", "pending_action_scoring", "shared_training_requests",
           "retired_model_partitions")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--traces-per-user", type=int, default=10)
    parser.add_argument("--pending", type=float, default=0.01)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server", default=os.environ.get(
        "STASH_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432"))
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()

    name = f"stash_bench_sensors_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(f"{args.server}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = f"{args.server}/{name}"
    try:
        return run(args, url)
    finally:
        if not args.keep:
            with admin.connect() as connection:
                connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        else:
            print(f"kept {url}")
        admin.dispose()


def run(args: argparse.Namespace, url: str) -> int:
    import dagster as dg

    from stash_pipeline.store import Store

    os.environ["DATABASE_URL"] = url
    store = Store(url)
    store.migrate()
    started = last = time.perf_counter()

    def step(table: str) -> None:
        nonlocal last
        now = time.perf_counter()
        print(f"built {table}: {now - last:.1f} s", flush=True)
        last = now

    fill(store.engine, users=args.users, traces_per_user=args.traces_per_user,
         pending=args.pending, on_step=step)
    step("analyze")
    with store.reading() as connection:
        counts = {table: connection.scalar(sa.text(f"SELECT count(*) FROM {table}"))
                  for table in ("traces", "reward_models", "scores", "scoring_candidates")}
    print(f"store built in {time.perf_counter() - started:.0f} s: " +
          ", ".join(f"{n:,} {table}" for table, n in counts.items()), flush=True)

    from stash_pipeline.instance import definitions

    defs = definitions()
    slowest = 0.0
    with tempfile.TemporaryDirectory() as home, \
            dg.instance_for_test(temp_dir=home) as instance:
        for sensor_name in SENSORS:
            sensor = defs.resolve_sensor_def(sensor_name)
            seconds, runs = [], 0
            for _ in range(args.rounds):
                with dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(),
                                             definitions=defs, sensor_name=sensor_name,
                                             resources=defs.resources) as context:
                    start = time.perf_counter()
                    data = sensor.evaluate_tick(context)
                    seconds.append(time.perf_counter() - start)
                runs = len(data.run_requests or ())
            slowest = max(slowest, *seconds)
            print(f"{sensor_name}: first tick {seconds[0]:.3f} s, slowest {max(seconds):.3f} s, "
                  f"{runs} run requests", flush=True)
    store.dispose()
    print(f"slowest_tick_s: {slowest:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
