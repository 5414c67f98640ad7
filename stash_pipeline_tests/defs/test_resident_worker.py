"""Score again in seconds (issue 54 item 3): with a resident worker (``worker.resident``, which
`stash-pipeline dev` starts), a scoring run's job goes to that one process, torch already loaded,
instead of a new worker process; each job is still the run's step, with its Pipes events and
stored scores. Without one answering, the job starts a new process as before."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from stash_pipeline.compute.resident import RESIDENT_ENV, SERVED
from stash_pipeline.dagster_runs.in_process import run_sensor_requests
from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.pipelines import trace_scoring
from stash_pipeline.services import scoring_requests
from stash_pipeline.store import Store
from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, bound

pytestmark = [pytest.mark.slow, pytest.mark.worker_process]


@pytest.fixture
def resident() -> Iterator[tuple[subprocess.Popen, str]]:
    """A resident worker on a socket of its own (a short path: Unix sockets take 107 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="rw-"))
    path = str(folder / "w.sock")
    process = subprocess.Popen([sys.executable, "-m", "stash_pipeline.worker.resident", path],
                               stderr=subprocess.PIPE, text=True)
    try:
        ready = process.stderr.readline()  # after torch and the job modules are loaded
        assert "ready" in ready, ready + process.stderr.read()
        yield process, path
    finally:
        process.terminate()
        process.wait(timeout=bound(PROCESS_EXIT_S))
        shutil.rmtree(folder, ignore_errors=True)


def score_again(instance: dg.DagsterInstance, store: Store, trace_ids: list[str]) -> dg.DagsterRun:
    request = scoring_requests.request(store, "ana", trace_ids)
    [run] = run_sensor_requests(instance, definitions(), "score_again_for_traces",
                                run_keys=[trace_scoring.request_run_key(request.id)])
    assert run.status == dg.DagsterRunStatus.SUCCESS
    return run


def messages(instance: dg.DagsterInstance, run: dg.DagsterRun) -> list[str]:
    return [entry.user_message for entry in instance.all_logs(run.run_id)]


def test_score_again_jobs_go_to_the_one_resident_worker(store, instance, release, resident,
                                                        shared_checkpoint, monkeypatch):
    from stash_pipeline.worker.scoring import RewardModel

    process, path = resident
    monkeypatch.setenv(RESIDENT_ENV, path)
    records = agentprocessbench_records(2)
    store.import_traces(records)
    first, second = (r.trace.id for r in records)
    runs = [score_again(instance, store, [first]), score_again(instance, store, [second])]

    for run in runs:  # both served by the same process, which the step did not start
        said = messages(instance, run)
        assert f"{SERVED} (pid {process.pid}): no new process, torch already loaded" in said
        assert any("phase scoring done" in m for m in said)  # the worker's Pipes events
    assert process.poll() is None  # still serving
    expected = RewardModel(shared_checkpoint).score_traces(store.get_traces([first, second]))
    for trace_id, raw in zip((first, second), expected):
        [score] = store.scores_for(trace_id)
        assert (score.evaluator, score.raw) == ("r1", pytest.approx(raw, abs=1e-5))


def test_without_a_resident_worker_the_job_starts_a_new_process(store, instance, release,
                                                                monkeypatch, tmp_path):
    monkeypatch.setenv(RESIDENT_ENV, str(tmp_path / "nobody.sock"))
    records = agentprocessbench_records(1)
    store.import_traces(records)
    run = score_again(instance, store, [records[0].trace.id])
    said = messages(instance, run)
    assert any("no resident worker answers" in m for m in said)
    assert not any(SERVED in m for m in said)
    assert [s.evaluator for s in store.scores_for(records[0].trace.id)] == ["r1"]


def test_a_training_job_never_goes_to_the_resident_worker(tmp_path, monkeypatch):
    """Training keeps a process of its own: its memory is returned when it ends."""
    import stash_pipeline.compute.local as local
    from stash_pipeline.compute.contract import JobSettings, write_job

    asked = []
    monkeypatch.setattr(local, "run_resident_worker", lambda *args, **_: asked.append(args))
    monkeypatch.setattr(local, "run_local_worker", lambda *_, **__: "a new process")
    job_dir = tmp_path / "job"
    write_job(job_dir, JobSettings(evaluator="m", base_model="base"), train_pairs=[])
    compute = local.LocalCompute("python", resident=str(tmp_path / "w.sock"))
    assert compute.launch(object(), job_dir) == "a new process"
    assert asked == []


def test_a_scoring_runs_step_runs_in_the_runs_own_process():
    """Dagster's default executor would start a second process for the one step, which imports
    Dagster and the code location again."""
    job = definitions().resolve_job_def("trace_scoring")
    assert job.executor_def.name == dg.in_process_executor.name


def test_a_step_that_goes_away_stops_its_job_and_the_worker_serves_on(resident, tmp_path,
                                                                      shared_checkpoint):
    """A cancelled or killed run closes its connection: the job ends through its failure path
    (as SIGTERM ends a worker process's), and the next job is served by the same process."""
    import errno
    import os
    import socket

    from dagster_pipes import (
        DAGSTER_PIPES_CONTEXT_ENV_VAR,
        DAGSTER_PIPES_MESSAGES_ENV_VAR,
        encode_param,
    )

    from stash_pipeline.compute.contract import (
        CHECKPOINT_INPUT,
        JobSettings,
        read_resident_message,
        resident_message,
        write_job,
    )
    from stash_pipeline.compute.resident import connect
    from stash_pipeline.compute.worker_log import LOG
    from stash_pipeline_tests.support.waiting import wait_until

    process, path = resident
    job_dir = tmp_path / "job"
    write_job(job_dir, JobSettings(evaluator="r1", checkpoint=CHECKPOINT_INPUT,
                                   outputs=("scores",)),
              score_traces=[agentprocessbench_records(1)[0].trace])
    shutil.copyfile(shared_checkpoint, job_dir / CHECKPOINT_INPUT)
    context = tmp_path / "context"  # the step's Pipes context, which never comes: the job waits
    os.mkfifo(context)
    env = {DAGSTER_PIPES_CONTEXT_ENV_VAR: encode_param({"path": str(context)}),
           DAGSTER_PIPES_MESSAGES_ENV_VAR: encode_param({"path": str(tmp_path / "messages")})}

    def ask(directory: Path, env: dict) -> tuple[socket.socket, object]:
        client = connect(path)
        assert client is not None
        client.settimeout(bound(PROCESS_EXIT_S))
        client.sendall(resident_message({"job_dir": str(directory), "env": env}))
        stream = client.makefile("rb")
        assert read_resident_message(stream) == {"pid": process.pid}
        return client, stream

    def reading() -> int | None:
        """The context's writing end, once the job opens it to read (then it waits there)."""
        try:
            return os.open(context, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            assert error.errno == errno.ENXIO  # no reader yet
            return None

    client, stream = ask(job_dir, env)
    writer: list[int] = []
    with client:
        wait_until(lambda: bool(writer) or writer.extend(filter(None, [reading()])) or writer,
                   timeout_s=PROCESS_EXIT_S, what="the job to open its Pipes context")
        client.shutdown(socket.SHUT_WR)  # the step's side closes, as a cancelled run's does
        assert read_resident_message(stream) == {"exit": 1}
    os.close(writer[0])
    assert "WorkerStopped: stopped by signal 15 (SIGTERM)" in (job_dir / LOG).read_text()
    client, stream = ask(tmp_path / "no-such-job", {})  # served on, by the same process
    with client:
        assert read_resident_message(stream) == {"exit": 2}  # the worker's usage error
    assert process.poll() is None


def test_the_resident_worker_honours_a_chunk_s_budget(store, instance, release, resident,
                                                      monkeypatch):
    """Issue 54: a background chunk's work budget bounds it in the resident worker too: spent
    after the first group, only that group's traces are stored and the rest stay queued."""
    from stash_pipeline.defs.scoring.sensors import BACKGROUND_TAG, scoring_config
    from stash_pipeline.worker.scoring import FIRST_GROUP

    process, path = resident
    monkeypatch.setenv(RESIDENT_ENV, path)
    records = agentprocessbench_records(6)
    store.import_traces(records)
    store.settle_release_queue()
    ids = [r.trace.id for r in records]
    result = definitions().resolve_job_def("trace_scoring").execute_in_process(
        instance=instance, tags={BACKGROUND_TAG: "r1"},
        run_config=scoring_config("r1", True, whole_traces=False, trace_ids=ids,
                                  versions=[1] * len(ids), work_seconds=1e-6))
    assert result.success
    said = messages(instance, result.dagster_run)
    assert f"{SERVED} (pid {process.pid}): no new process, torch already loaded" in said
    assert any(f"stopped after {FIRST_GROUP} of {len(ids)} traces" in m for m in said)
    assert {t for t in ids if store.scored_version(t, "r1")} == set(ids[:FIRST_GROUP])
    assert {w.trace_id for w in store.scoring_work(personal=False, limit=100)} == \
        set(ids[FIRST_GROUP:])


def served_by(instance: dg.DagsterInstance, run: dg.DagsterRun) -> int | None:
    """The pid of the resident worker that took the run's job, None for a new process."""
    for message in messages(instance, run):
        if message.startswith(f"{SERVED} (pid "):
            return int(message.split("(pid ", 1)[1].split(")", 1)[0])
    return None


def test_a_command_s_chunks_share_one_resident_worker_it_starts_and_stops(
        store, instance, release, monkeypatch):
    """A `--wait` command that works chunks in its own process (no daemon) starts a resident
    worker for them: torch loads once, not once a chunk; it is stopped when the command ends."""
    from stash_pipeline.compute.resident import resident_worker_while

    monkeypatch.delenv(RESIDENT_ENV, raising=False)
    monkeypatch.setenv("RM_COMPUTE", "local")
    records = agentprocessbench_records(2)
    store.import_traces(records)
    with resident_worker_while(sys.executable) as path:
        assert path and Path(path).is_socket()
        runs = [score_again(instance, store, [r.trace.id]) for r in records]
    pids = {served_by(instance, run) for run in runs}
    assert len(pids) == 1 and None not in pids  # one worker, not a process per chunk
    assert RESIDENT_ENV not in os.environ and not Path(path).exists()
    [pid] = pids
    assert not Path(f"/proc/{pid}").exists()  # stopped and reaped


def test_a_command_uses_the_resident_worker_that_answers_and_starts_none(
        store, instance, release, resident, monkeypatch):
    from stash_pipeline.compute.resident import resident_worker_while

    process, path = resident
    monkeypatch.setenv(RESIDENT_ENV, path)
    records = agentprocessbench_records(1)
    store.import_traces(records)
    with resident_worker_while(sys.executable) as used:
        assert used == path
        run = score_again(instance, store, [records[0].trace.id])
    assert served_by(instance, run) == process.pid  # the probe cost it nothing: it serves on
    assert process.poll() is None


def test_no_resident_worker_where_the_worker_runs_elsewhere(monkeypatch):
    from stash_pipeline.compute.resident import resident_worker_while

    monkeypatch.setenv("RM_COMPUTE", "modal")
    monkeypatch.delenv(RESIDENT_ENV, raising=False)
    with resident_worker_while(sys.executable) as path:
        assert path is None and RESIDENT_ENV not in os.environ
