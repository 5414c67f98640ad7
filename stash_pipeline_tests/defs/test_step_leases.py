"""A worker step starts at most once (issue 50): two real starts of one run's step, each a process
of its own. The second finds the lease held and exits without work and without changing the
model; the run's failure, as Dagster reports it for a restarted run worker, leaves the model to
the process that holds the lease; a lease whose process died is taken over; a finished step is
not worked again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from stash_pipeline.core.requests import parse_reward_model_request
from stash_pipeline.defs.personal.partitions import model_partition_key
from stash_pipeline.defs.resources import ComputeResource, StoreResource
from stash_pipeline.defs.runs import record_dead_run
from stash_pipeline.store import Store
from stash_pipeline_tests.support.lease_start import SECOND_START_EXIT
from stash_pipeline_tests.support.store_samples import make_record, make_trace
from stash_pipeline_tests.support.waiting import PATIENT_S

STEP = "personal_checkpoint"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def lease_store(request: pytest.FixtureRequest) -> Store:
    """Both databases (the PostgreSQL one is the session's: each test uses its own owner)."""
    return request.getfixturevalue("store" if request.param == "sqlite" else "postgres_store")


def _url(store: Store) -> str:
    return store.engine.url.render_as_string(hide_password=False)


def _start(store: Store, run_id: str, model_id: str, go: Path,
           worker_slots: int = 0) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "stash_pipeline_tests.support.lease_start", _url(store), run_id,
         STEP, model_id, str(go), str(worker_slots)], stdout=subprocess.PIPE, text=True)


def _model(store: Store, owner: str) -> str:
    store.import_traces([make_record(make_trace(f"{owner}-t", owner=owner))])
    return store.create_reward_model(owner, parse_reward_model_request(
        {"name": "m", "trace_ids": [f"{owner}-t"]})).id


def test_a_second_start_of_a_step_does_nothing_and_the_model_follows_the_first(
        lease_store: Store, tmp_path: Path) -> None:
    store = lease_store
    model_id = _model(store, f"lease-{os.getpid()}-{tmp_path.name}")
    run_id, go = f"run-{tmp_path.name}", tmp_path / "go"
    first = _start(store, run_id, model_id, go)
    try:
        assert first.stdout.readline().strip() == "working"
        before = store.get_reward_model(model_id)
        assert (before.status, before.run_id) == ("running", run_id)

        second = _start(store, run_id, model_id, go)
        out, _ = second.communicate(timeout=PATIENT_S)
        assert second.returncode == SECOND_START_EXIT
        assert out.startswith("second start: step personal_checkpoint of run") and \
            "is running in process" in out
        assert store.get_reward_model(model_id) == before

        # Dagster fails a run whose worker started twice: the run-failure sensor's recording
        # leaves the model to the process that holds the lease.
        run = dg.DagsterRun(job_name="personal_reward_model_training", run_id=run_id,
                            tags={"dagster/partition": model_partition_key(before)})
        assert record_dead_run(run, "started a new run worker", StoreResource(
            database_url=_url(store)), ComputeResource()) is None
        assert store.get_reward_model(model_id) == before

        go.touch()
        assert first.wait(timeout=PATIENT_S) == 0
    finally:
        first.kill()
    assert store.get_reward_model(model_id).status == "succeeded"
    # Done: a late start of the same step does nothing either.
    late = _start(store, run_id, model_id, go)
    out, _ = late.communicate(timeout=PATIENT_S)
    assert late.returncode == SECOND_START_EXIT and "already ran" in out


@pytest.mark.skipif(sys.platform != "linux", reason="process liveness through /proc")
def test_a_lease_whose_process_died_is_taken_over(lease_store: Store, tmp_path: Path) -> None:
    store = lease_store
    model_id = _model(store, f"dead-{os.getpid()}-{tmp_path.name}")
    run_id, go = f"run-{tmp_path.name}", tmp_path / "go"
    first = _start(store, run_id, model_id, go)
    assert first.stdout.readline().strip() == "working"
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=PATIENT_S)
    go.touch()
    again = _start(store, run_id, model_id, go)
    out, _ = again.communicate(timeout=PATIENT_S)
    assert again.returncode == 0 and out.strip() == "working"
    assert store.get_reward_model(model_id).status == "succeeded"


def test_the_worker_s_pool_of_one_holds_for_steps_dagster_lost_track_of(
        lease_store: Store, tmp_path: Path) -> None:
    """Two runs' worker steps, each a process of its own, with one worker slot: the second
    waits, saying for whom, and works only once the first has let go of the worker, even if
    Dagster freed the first run's pool slot (its run failed while its step went on)."""
    store = lease_store
    owner = f"pool-{os.getpid()}-{tmp_path.name}"
    first_model, second_model = _model(store, owner), _model(store, owner + "-b")
    first_go, second_go = tmp_path / "go-a", tmp_path / "go-b"
    first = _start(store, f"a-{tmp_path.name}", first_model, first_go, worker_slots=1)
    second = None
    try:
        assert first.stdout.readline().strip() == "working"
        second = _start(store, f"b-{tmp_path.name}", second_model, second_go, worker_slots=1)
        assert second.stdout.readline().startswith(
            f"waiting for the worker, held by run a-{tmp_path.name}")
        assert store.get_reward_model(second_model).status == "queued"  # no work yet
        first_go.touch()
        assert first.wait(timeout=PATIENT_S) == 0
        assert second.stdout.readline().strip() == "working"
        second_go.touch()
        assert second.wait(timeout=PATIENT_S) == 0
    finally:
        for process in (first, second):
            if process is not None:
                process.kill()
    assert store.get_reward_model(second_model).status == "succeeded"
