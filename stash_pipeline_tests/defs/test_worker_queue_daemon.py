"""The worker's queue as a deployment runs it (issue 43): a gRPC code server and `dagster-daemon`
with the run queue of the packaged dagster_local.yaml (run_queue.PromptRunCoordinator), on the
test's instance.

- A person's Score again, asked while background scoring of many traces is queued and running,
  runs before the queued background chunks; `traces score --wait` and the API say how many runs
  are ahead of it meanwhile.
- The code server goes away while a request is queued: the run queue launches its run all the
  same (a process of its own, which loads the code itself: stash_pipeline.run_launcher), and the
  request is done without the code server.

The background chunk that holds the worker is held there by a gate: the worker's Python
(RM_WORKER_PYTHON) waits for a file the test creates, so "running" lasts until the test says.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from stash_pipeline.api import create_app
from stash_pipeline.dagster_runs.instance import get_instance
from stash_pipeline.dagster_runs.waits import INVOCATION_TAG
from stash_pipeline.defs.abandoned_runs import PROCESS_TAG
from stash_pipeline.defs.scoring.sensors import BACKGROUND_TAG
from stash_pipeline.defs.worker_queue import PRIORITY_TAG, worker_holders
from stash_pipeline.defs.worker_runs import REWARD_POOL
from stash_pipeline.pipelines.trace_scoring import SCORING_REQUEST_TAG
from stash_pipeline.services import accounts
from stash_pipeline_tests.support.deployment import BIN, Deployment, release_scoring
from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, SERVER_START_S, bound, wait_until

SCORE = "/api/v1/traces/score"

pytestmark = pytest.mark.slow


@pytest.fixture
def deployment(home: Path, store, monkeypatch, shared_checkpoint) -> Iterator[Deployment]:
    """The release r1 (a tiny checkpoint) and 10 of ana's traces, all pending for it; background
    chunks of 2 traces; the worker behind a gate; a code server and a daemon running."""
    config = yaml.safe_load((home / "stash" / "dagster" / "dagster.yaml").read_text())
    assert config["run_coordinator"]["class"] == "PromptRunCoordinator"  # the packaged one
    assert config["run_coordinator"]["config"]["max_user_code_failure_retries"] > 0
    _, key = accounts.create(store, "Ana", account_id="ana")
    with release_scoring(home, store, monkeypatch, shared_checkpoint, traces=10) as running:
        running.key = key
        yield running


@contextmanager
def served_api(store) -> Iterator[Any]:
    """The API on a loopback port over the test's store."""
    from stash_pipeline.objects import LocalObjectStore, UrlSigner
    from stash_pipeline_tests.support.api_helpers import SETTINGS, Api, loopback_socket, serve

    sock = loopback_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    objects = LocalObjectStore(Path(os.environ["STASH_HOME"]) / "objects", api_url=url,
                               signer=UrlSigner(b"k" * 32))
    for _ in serve(create_app(store, objects, SETTINGS), sock):
        yield Api(url, store, objects)


def scoring_runs(instance: dg.DagsterInstance, *statuses: dg.DagsterRunStatus) -> list:
    """The background chunks in these states."""
    return [run for run in instance.get_runs(filters=dg.RunsFilter(
        job_name="trace_scoring", statuses=list(statuses))) if BACKGROUND_TAG in run.tags]


def worker_step_start(instance: dg.DagsterInstance, run_id: str) -> float | None:
    """When the run's step in the worker's pool started (it then held the worker)."""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_START).records
    return records[0].event_log_entry.timestamp if records else None


def test_a_score_again_runs_before_the_queued_background_chunks(deployment, store, home):
    instance = get_instance()
    # Background scoring: a chunk holds the worker (its worker waits at the gate), one is queued.
    wait_until(lambda: bool(worker_holders(instance))
               and bool(scoring_runs(instance, dg.DagsterRunStatus.QUEUED)),
               timeout_s=SERVER_START_S * 3,
               what="a background chunk holding the worker and one queued behind it")
    [holding] = worker_holders(instance)
    queued_chunks = [run.run_id for run in scoring_runs(instance, dg.DagsterRunStatus.QUEUED)]
    assert instance.get_run_by_id(holding).tags[PRIORITY_TAG] == "-10"
    trace_id = agentprocessbench_records(1)[0].trace.id

    cli = subprocess.Popen(
        [str(BIN / "stash-pipeline"), "traces", "score", trace_id, "--owner", "ana", "--wait"],
        cwd=home, env={**os.environ}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with served_api(store) as api:
            client = api.client(deployment.key)

            def request_waits() -> bool:
                asked = store.scoring_requests()
                wait = asked and client.get(f"{SCORE}/{asked[0].id}").json().get("wait")
                return bool(wait) and wait["waiting_for"] == "worker"

            wait_until(request_waits, timeout_s=SERVER_START_S,
                       what="the Score again request's run to wait for the worker")
            [asked] = store.scoring_requests()
            shown = client.get(f"{SCORE}/{asked.id}").json()
            # Runs ahead: the chunk holding the worker; never a queued chunk.
            assert shown["status"] == "queued" and shown["error"] is None, shown
            assert shown["wait"]["runs_ahead"] == 1, shown
            assert shown["wait"]["text"].startswith("waiting for the worker: ")
            assert shown["trace_ids"] == [trace_id] and shown["evaluator"] == "r1"
            assert client.get(f"{SCORE}/{uuid.uuid4()}").status_code == 404

            deployment.gate.touch()  # the background chunk's worker runs now
            out, err = cli.communicate(timeout=bound(PROCESS_EXIT_S))
            assert cli.returncode == 0, (out, err)
            done = client.get(f"{SCORE}/{asked.id}").json()
            assert (done["status"], done["wait"], done["error"]) == ("succeeded", None, None)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    said = [int(n) for n in re.findall(r"^waiting for the worker: (\d+) runs? ahead$", err, re.M)]
    assert said and said[0] >= 1, err
    assert f"Score again requested (request {asked.id})" in out
    assert [s.evaluator for s in store.scores_for(trace_id)] == ["r1"]

    # The daemon made the request's run, in the run queue: the command ran nothing itself.
    [request_run] = instance.get_runs(
        filters=dg.RunsFilter(tags={SCORING_REQUEST_TAG: asked.run_ref}))
    assert INVOCATION_TAG not in request_run.tags and PROCESS_TAG not in request_run.tags
    assert instance.get_records_for_run(request_run.run_id,
                                        of_type=dg.DagsterEventType.RUN_ENQUEUED).records
    asked_started = worker_step_start(instance, request_run.run_id)
    assert request_run.tags[PRIORITY_TAG] == "10" and asked_started is not None
    for run_id in queued_chunks:
        wait_until(lambda run_id=run_id: instance.get_run_by_id(run_id).is_finished,
                   timeout_s=PROCESS_EXIT_S, what=f"background chunk {run_id} to finish")
        assert instance.get_run_by_id(run_id).is_success, deployment.log("daemon")
        assert worker_step_start(instance, run_id) > asked_started


def test_a_score_pending_wait_started_first_does_not_take_the_worker_ahead_of_a_request(
        deployment, store, home):
    """`evaluator score-pending --wait` makes no run beside a daemon: it waits while the daemon
    scores the queue in background chunks, and a Score again asked after it still has the
    worker before every chunk that was queued when it was asked."""
    instance = get_instance()
    wait_until(lambda: bool(worker_holders(instance)), timeout_s=SERVER_START_S * 3,
               what="a background chunk holding the worker")

    def cli(*command: str) -> subprocess.Popen:
        return subprocess.Popen([str(BIN / "stash-pipeline"), *command], cwd=home,
                                env={**os.environ}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    pending = cli("evaluator", "score-pending", "--wait")
    score = None
    try:
        # The command is waiting once its heartbeat check passed and it counted the queue.
        wait_until(lambda: instance.get_runs(filters=dg.RunsFilter(
            job_name="trace_scoring", statuses=[dg.DagsterRunStatus.QUEUED])) != [],
                   timeout_s=SERVER_START_S, what="a background chunk queued")
        trace_id = agentprocessbench_records(1)[0].trace.id
        score = cli("traces", "score", trace_id, "--owner", "ana", "--wait")
        wait_until(lambda: bool(store.scoring_requests()), timeout_s=SERVER_START_S,
                   what="the Score again request")
        [asked] = store.scoring_requests()
        wait_until(lambda: bool(instance.get_runs(filters=dg.RunsFilter(
            tags={SCORING_REQUEST_TAG: asked.run_ref}))), timeout_s=SERVER_START_S,
                   what="the daemon to make the request's run")
        queued_then = [run.run_id for run in scoring_runs(instance, dg.DagsterRunStatus.QUEUED)]
        deployment.gate.touch()
        out, err = score.communicate(timeout=bound(PROCESS_EXIT_S))
        assert score.returncode == 0, (out, err)
        pending_out, pending_err = pending.communicate(timeout=bound(PROCESS_EXIT_S))
        assert pending.returncode == 0, (pending_out, pending_err)
    finally:
        for process in (pending, score):
            if process is not None and process.poll() is None:
                process.kill()
                process.communicate()
    assert re.search(r"^waiting for the pipeline's background scoring: \d+ of \d+ queued "
                     r"trace versions left$", pending_err, re.M), pending_err
    assert "Release r1: 10 traces scored, 0 pending." in pending_out
    # Every run was the daemon's: neither command ran one itself.
    assert not [r for r in instance.get_runs() if INVOCATION_TAG in r.tags]
    [request_run] = instance.get_runs(
        filters=dg.RunsFilter(tags={SCORING_REQUEST_TAG: asked.run_ref}))
    asked_started = worker_step_start(instance, request_run.run_id)
    for run_id in queued_then:
        assert worker_step_start(instance, run_id) > asked_started


def test_a_request_queued_while_the_code_server_is_away_is_done_without_it(deployment, store):
    """A request's run is queued behind the worker; the code server goes; the worker frees; the
    run queue launches the run, which needs no code server, and the request is done."""
    from stash_pipeline.dagster_runs.run_state import request_state
    from stash_pipeline.services import scoring_requests

    instance = get_instance()
    deployment.gate.touch()  # the worker runs at once here
    storage = instance.event_log_storage
    storage.initialize_concurrency_limit_to_default(REWARD_POOL)
    # Something else holds the worker (as a long training would), so the request stays queued.
    assert storage.claim_concurrency_slot(REWARD_POOL, "holder", "personal_checkpoint").is_claimed
    trace_id = agentprocessbench_records(1)[0].trace.id
    request = scoring_requests.request(store, "ana", [trace_id])

    def request_run() -> dg.DagsterRun | None:
        runs = instance.get_runs(filters=dg.RunsFilter(tags=scoring_requests.run_tags(request)))
        return runs[0] if runs else None

    wait_until(lambda: request_run() is not None
               and request_run().status == dg.DagsterRunStatus.QUEUED,
               timeout_s=SERVER_START_S * 2, what="the request's run to be queued")
    deployment.stop("code-server")
    storage.free_concurrency_slots_for_run("holder")
    wait_until(lambda: request_run().is_finished, timeout_s=PROCESS_EXIT_S,
               what="the request's run to end with the code server away")
    state = request_state(scoring_requests.run_tags(request))
    assert state["status"] == "succeeded", (state, deployment.log("daemon"))
    assert [s.evaluator for s in store.scores_for(trace_id)] == ["r1"]
    messages = [r.event_log_entry.dagster_event.message or "" for r in instance.get_records_for_run(
        request_run().run_id, of_type=dg.DagsterEventType.ENGINE_EVENT).records]
    assert not any("re-submitting the run into the queue" in m for m in messages), messages
