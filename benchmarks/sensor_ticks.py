"""Sensor ticks at scale, as the daemon runs them: every sensor's tick on PostgreSQL for both the
store and Dagster's own storage, with the daemon's handling of what the tick returns (its
partitions added, its runs created and queued) timed with it.

The store holds ``--users`` users (default 100,000), each with ``--traces-per-user`` traces
(default 10: 1,000,000 traces) and one succeeded personal model that has scored them, finished 0
to 19 days ago, plus 1,000 queued models, 10,000 Score again requests, 10,000 requests to score
chosen traces, 10,000 shared training requests, a release that has scored every trace, and
``--pending`` (default 1%) of the traces waiting for their owner's model and for the release
(stash_pipeline_tests/support/bulk_store_helpers.py). Dagster's storage (dagster-postgres) holds a
partition for each model (100,000) and each model's training run, plus as many auto-scoring runs,
all finished (``--runs-per-user``, default 2: 200,000 runs).

Both are built with bulk SQL once into two databases, stash_bench_sensors_store and
stash_bench_sensors_dagster; each measurement runs on copies of them (CREATE DATABASE ...
TEMPLATE), so it starts from the same state: ``--reuse`` keeps the built databases for the next
run and uses them when their shape matches, ``--drop`` drops them and exits.

The code location is served by ``stash-pipeline code-server`` (gRPC) on the copies, and each
sensor's tick runs ``--rounds`` times (default 3, each from the cursor the one before left)
through the sensor daemon's own code (``dagster._daemon.sensor``): the sensor evaluated over gRPC,
then the daemon's work on its result. Prints per sensor the slowest tick, the evaluation's share
of it, the most CPU seconds a tick took in the daemon and in the code server and the connections
and statements it sent to Dagster's storage (figures the machine's load does not change), the
runs created and partitions added; last ``slowest_tick_s: X`` (Dagster warns at 60 s; the aim
is 5 s).

    .venv/bin/python benchmarks/sensor_ticks.py [--users 100000] [--traces-per-user 10] \\
        [--runs-per-user 2] [--rounds 3] [--reuse | --drop] \\
        [--server postgresql+psycopg://postgres@127.0.0.1:5432]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
import yaml

ROOT = Path(__file__).resolve().parents[1]
# The repository root, for the store suite's bulk fill (stash_pipeline_tests.support).
sys.path.insert(0, str(ROOT))
from stash_pipeline_tests.support.bulk_store_helpers import fill  # noqa: E402

STORE_DB = "stash_bench_sensors_store"
DAGSTER_DB = "stash_bench_sensors_dagster"
LOCATION = "stash_pipeline"
# Dagster's own storage goes through psycopg2 (docs: ../shared/notes, dagster-postgres trap).
DAGSTER_SCHEME = "postgresql+psycopg2"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--traces-per-user", type=int, default=10)
    parser.add_argument("--runs-per-user", type=int, default=2)
    parser.add_argument("--pending", type=float, default=0.01)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server", default=os.environ.get(
        "STASH_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432"))
    parser.add_argument("--reuse", action="store_true",
                        help="keep the built databases, and use them when their shape matches")
    parser.add_argument("--drop", action="store_true", help="drop the built databases and exit")
    args = parser.parse_args()
    admin = sa.create_engine(f"{args.server}/postgres", isolation_level="AUTOCOMMIT")
    try:
        if args.drop:
            for name in (STORE_DB, DAGSTER_DB):
                drop(admin, name)
            print(f"dropped {STORE_DB}, {DAGSTER_DB}")
            return 0
        shape = json.dumps({"users": args.users, "traces": args.traces_per_user,
                            "runs": args.runs_per_user, "pending": args.pending})
        if args.reuse and built_shape(admin, STORE_DB) == shape == built_shape(admin, DAGSTER_DB):
            print(f"reusing {STORE_DB} and {DAGSTER_DB} ({shape})", flush=True)
        else:
            build(admin, args, shape)
        try:
            with copies(admin, args.server) as (store_url, dagster_url):
                return measure(args, store_url, dagster_url)
        finally:
            if not args.reuse:
                for name in (STORE_DB, DAGSTER_DB):
                    drop(admin, name)
    finally:
        admin.dispose()


# Building ---------------------------------------------------------------------------------

def built_shape(admin: sa.Engine, name: str) -> str | None:
    with admin.connect() as connection:
        return connection.scalar(sa.text(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = :n"),
            {"n": name})


def drop(admin: sa.Engine, name: str) -> None:
    with admin.connect() as connection:
        connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def create(admin: sa.Engine, name: str, template: str | None = None) -> None:
    drop(admin, name)
    copy = f' TEMPLATE "{template}" STRATEGY FILE_COPY' if template else ""
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"{copy}'))


def build(admin: sa.Engine, args: argparse.Namespace, shape: str) -> None:
    from stash_pipeline.store import Store

    started = last = time.perf_counter()

    def step(what: str) -> None:
        nonlocal last
        now = time.perf_counter()
        print(f"built {what}: {now - last:.1f} s", flush=True)
        last = now

    for name in (STORE_DB, DAGSTER_DB):
        create(admin, name)
    store = Store(f"{args.server}/{STORE_DB}")
    try:
        store.migrate()
        fill(store.engine, users=args.users, traces_per_user=args.traces_per_user,
             pending=args.pending, on_step=step)
        step("store analyzed")
    finally:
        store.dispose()
    fill_dagster(dagster_url(args.server, DAGSTER_DB), store_url=f"{args.server}/{STORE_DB}",
                 users=args.users, runs_per_user=args.runs_per_user, on_step=step)
    with admin.connect() as connection:
        for name in (STORE_DB, DAGSTER_DB):
            connection.execute(sa.text(f"COMMENT ON DATABASE \"{name}\" IS '{shape}'"))
    print(f"built in {time.perf_counter() - started:.0f} s", flush=True)


def dagster_url(server: str, name: str) -> str:
    return f"{DAGSTER_SCHEME}://{server.split('://', 1)[1]}/{name}"


def instance_yaml(url: str) -> dict:
    """The production instance's run queue and pools (deploy/dagster.yaml) on this storage; no
    run launcher (runs stay queued: the run queue's launching is not a sensor's tick)."""
    production = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())
    return {"storage": {"postgres": {"postgres_url": url}},
            "run_coordinator": production["run_coordinator"],
            "concurrency": production["concurrency"], "telemetry": {"enabled": False}}


@contextmanager
def instance_at(url: str) -> Iterator:
    import dagster as dg

    with tempfile.TemporaryDirectory() as home:
        (Path(home) / "dagster.yaml").write_text(yaml.safe_dump(instance_yaml(url)))
        with dg.DagsterInstance.from_config(home) as instance:
            yield instance


# Runs cloned from one real run of each kind: (job, run config, tags), {u} the user's number.
def _run_kinds(runs_per_user: int) -> list[tuple[str, dict | None, dict[str, str]]]:
    from stash_pipeline.defs.personal.partitions import ATTEMPT_TAG, MODEL_TAG
    from stash_pipeline.defs.scoring.sensors import BACKGROUND_TAG, scoring_config

    kinds = [("personal_reward_model_training", None, {
        "dagster/partition": "model-{u}--m{u}", "dagster/run_key": "m{u}:1",
        "dagster/sensor_name": "queued_reward_models", MODEL_TAG: "m{u}", ATTEMPT_TAG: "1"})]
    for n in range(1, runs_per_user):
        kinds.append(("trace_scoring", scoring_config("m{u}", False, trace_ids=["u{u}-t1"],
                                                      versions=[1]), {
            "dagster/run_key": f"auto:m{{u}}:{n}:0", BACKGROUND_TAG: "m{u}",
            "dagster/sensor_name": "pending_scoring"}))
    return kinds


def fill_dagster(url: str, *, store_url: str, users: int, runs_per_user: int,
                 on_step) -> None:
    """A partition per model (the keys queued_reward_models gives them) and ``runs_per_user``
    finished runs per user: real runs, one of each kind, cloned in SQL."""
    import dagster as dg

    from stash_pipeline.dagster_runs.instance import definitions

    os.environ["DATABASE_URL"] = store_url
    defs = definitions()
    with instance_at(url) as instance:
        templates = []
        for job, config, tags in _run_kinds(runs_per_user):
            run = instance.create_run_for_job(
                defs.resolve_job_def(job), run_config=config, status=dg.DagsterRunStatus.SUCCESS,
                tags={key: value.replace("{u}", "0") for key, value in tags.items()})
            templates.append((run.run_id, tags))
        on_step("dagster storage created")
        engine = sa.create_engine(url)
        try:
            with engine.begin() as connection:
                connection.execute(sa.text("""
                    INSERT INTO dynamic_partitions (partitions_def_name, partition)
                    SELECT 'personal_reward_model', 'model-' || u || '--m' || u
                    FROM generate_series(1, :users) u"""), {"users": users})
                on_step(f"{users:,} partitions")
                for template, tags in templates:
                    clone_runs(connection, template, tags, users)
                    on_step(f"{users:,} runs like {template[:8]}")
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
                connection.execute(sa.text("VACUUM ANALYZE"))
            on_step("dagster storage analyzed")
        finally:
            engine.dispose()


def clone_runs(connection: sa.Connection, template: str, tags: dict[str, str],
               users: int) -> None:
    """``users`` copies of run ``template``, each with its own run id and tags ({u} filled in)."""
    connection.execute(sa.text("""
        CREATE TEMP TABLE cloned AS
        SELECT u, md5(:template || u) AS run_id FROM generate_series(1, :users) u"""),
        {"template": template, "users": users})
    connection.execute(sa.text("""
        INSERT INTO runs (run_id, snapshot_id, pipeline_name, mode, status, run_body, partition,
                          partition_set, create_timestamp, update_timestamp, start_time,
                          end_time, backfill_id)
        SELECT c.run_id, r.snapshot_id, r.pipeline_name, r.mode, r.status,
               replace(r.run_body, :template, c.run_id),
               replace(r.partition, '0', c.u::text), r.partition_set,
               now() - c.u * interval '1 second', now() - c.u * interval '1 second',
               extract(epoch FROM now()) - c.u - 60, extract(epoch FROM now()) - c.u, NULL
        FROM runs r, cloned c WHERE r.run_id = :template"""), {"template": template})
    for key, value in tags.items():
        connection.execute(sa.text("""
            INSERT INTO run_tags (run_id, key, value)
            SELECT run_id, :key, replace(:value, '{u}', u::text) FROM cloned"""),
            {"key": key, "value": value})
    connection.execute(sa.text("DROP TABLE cloned"))


# Measuring --------------------------------------------------------------------------------

@contextmanager
def copies(admin: sa.Engine, server: str) -> Iterator[tuple[str, str]]:
    """Fresh copies of the built databases, dropped afterwards."""
    suffix = uuid.uuid4().hex[:8]
    names = (f"{STORE_DB}_{suffix}", f"{DAGSTER_DB}_{suffix}")
    started = time.perf_counter()
    try:
        for name, template in zip(names, (STORE_DB, DAGSTER_DB)):
            create(admin, name, template)
        print(f"copied the databases: {time.perf_counter() - started:.1f} s", flush=True)
        yield f"{server}/{names[0]}", dagster_url(server, names[1])
    finally:
        for name in names:
            drop(admin, name)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def code_server(store_url: str, home: str, port: int) -> Iterator[int]:
    """``stash-pipeline code-server`` on the store copy, as the deployment runs it; its pid."""
    from dagster._grpc.client import DagsterGrpcClient

    log = Path(home) / "code-server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(Path(sys.executable).with_name("stash-pipeline")), "code-server", "--port",
             str(port)], env={**os.environ, "DATABASE_URL": store_url, "DAGSTER_HOME": home},
            stdout=out, stderr=subprocess.STDOUT, cwd=home)
    try:
        client = DagsterGrpcClient(port=port, host="127.0.0.1")
        deadline = time.monotonic() + 300
        while True:
            try:
                client.ping("ready")
                break
            except Exception:  # noqa: BLE001 - not serving yet
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the code server did not start:\n{log.read_text()}")
                time.sleep(0.2)
        yield server.pid
    finally:
        server.terminate()
        server.wait()


def cpu_s(pid: int) -> float:
    """CPU seconds (user and system) a process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class StorageCounts:
    """Connections opened and statements sent by this process (the daemon's side: Dagster's
    storage), counted by SQLAlchemy's events."""

    def __init__(self) -> None:
        self.connections = self.statements = 0
        sa.event.listen(sa.Engine, "connect", self._connected)
        sa.event.listen(sa.Engine, "before_cursor_execute", self._sent)

    def _connected(self, *_args) -> None:
        self.connections += 1

    def _sent(self, *_args) -> None:
        self.statements += 1

    def now(self) -> tuple[int, int]:
        return self.connections, self.statements


def measure(args: argparse.Namespace, store_url: str, dagster_db_url: str) -> int:
    from dagster._core.remote_representation.code_location import GrpcServerCodeLocation
    from dagster._core.scheduler.instigation import (
        InstigatorState,
        InstigatorStatus,
        InstigatorType,
        SensorInstigatorData,
    )
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import GrpcServerTarget
    from dagster._daemon import sensor as sensor_daemon
    from dagster._time import get_current_timestamp

    # The evaluation's share of a tick: the gRPC call that evaluates the sensor in the code server.
    evaluation = {"s": 0.0}
    evaluate = GrpcServerCodeLocation.get_sensor_execution_data

    def timed_evaluation(*a, **k):
        started = time.perf_counter()
        try:
            return evaluate(*a, **k)
        finally:
            evaluation["s"] += time.perf_counter() - started

    GrpcServerCodeLocation.get_sensor_execution_data = timed_evaluation
    logger = logging.getLogger("sensor_ticks")
    logger.setLevel(logging.WARNING)
    slowest = 0.0
    counts = StorageCounts()
    port = free_port()
    with tempfile.TemporaryDirectory() as home, code_server(store_url, home, port) as server:
        (Path(home) / "dagster.yaml").write_text(yaml.safe_dump(instance_yaml(dagster_db_url)))
        import dagster as dg

        with dg.DagsterInstance.from_config(home) as instance, WorkspaceProcessContext(
                instance, GrpcServerTarget(host="127.0.0.1", port=port, socket=None,
                                           location_name=LOCATION)) as workspace:
            [entry] = workspace.create_request_context().get_code_location_entries().values()
            assert entry.code_location, entry.load_error
            [repository] = entry.code_location.get_repositories().values()
            retention = instance.get_tick_retention_settings(InstigatorType.SENSOR)
            sensors = [s for s in repository.get_sensors()
                       if s.sensor_type.value == "STANDARD"]
            for remote in sensors:
                seconds, shares, runs, added, deleted, errors = [], [], 0, 0, 0, []
                work = []  # (CPU-s here, CPU-s in the code server, connections, statements)
                for _ in range(args.rounds):
                    state = instance.get_instigator_state(remote.get_remote_origin_id(),
                                                          remote.selector_id)
                    past = get_current_timestamp() - (remote.min_interval_seconds or 0) - 1
                    if state is None:
                        state = InstigatorState(
                            remote.get_remote_origin(), InstigatorType.SENSOR,
                            InstigatorStatus.DECLARED_IN_CODE,
                            SensorInstigatorData(min_interval=remote.min_interval_seconds,
                                                 last_sensor_start_timestamp=past,
                                                 sensor_type=remote.sensor_type))
                        instance.add_instigator_state(state)
                    else:  # the interval has passed: the daemon ticks it now
                        state = state.with_data(state.instigator_data._replace(
                            last_tick_timestamp=past, last_tick_start_timestamp=past))
                        instance.update_instigator_state(state)
                    evaluation["s"] = 0.0
                    before = (time.process_time(), cpu_s(server), *counts.now())
                    started = time.perf_counter()
                    for _ in sensor_daemon._process_tick_generator(
                            workspace, logger, remote, state, None, retention, None):
                        pass
                    seconds.append(time.perf_counter() - started)
                    shares.append(evaluation["s"])
                    after = (time.process_time(), cpu_s(server), *counts.now())
                    work.append(tuple(b - a for a, b in zip(before, after)))
                    [tick] = instance.get_ticks(remote.get_remote_origin_id(),
                                                remote.selector_id, limit=1)
                    runs += len(tick.run_ids)
                    for result in tick.tick_data.dynamic_partitions_request_results or ():
                        added += len(result.added_partitions or ())
                        deleted += len(result.deleted_partitions or ())
                    if tick.tick_data.error:
                        errors.append(tick.tick_data.error.message.splitlines()[0])
                worst = max(range(len(seconds)), key=seconds.__getitem__)
                slowest = max(slowest, seconds[worst])
                most = [max(w[i] for w in work) for i in range(4)]
                print(f"{remote.name}: slowest tick {seconds[worst]:.2f} s (evaluation "
                      f"{shares[worst]:.2f} s), first {seconds[0]:.2f} s; a tick at most "
                      f"{most[0]:.2f} CPU-s in the daemon, {most[1]:.2f} in the code server, "
                      f"{most[2]} connections and {most[3]} statements to Dagster's storage; "
                      f"{runs} runs created, {added} partitions added in {args.rounds} ticks; "
                      f"{(tick.skip_reason or '')[:60]}", flush=True)
                for error in errors:
                    print(f"  error: {error}", flush=True)
            partitions = len(instance.get_dynamic_partitions("personal_reward_model"))
            print(f"partitions left: {partitions:,}", flush=True)
    print(f"slowest_tick_s: {slowest:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
