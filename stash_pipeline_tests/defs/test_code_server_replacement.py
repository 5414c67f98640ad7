"""Replacing a code server (issue 50), the README's procedure with real processes: a code server
(`stash-pipeline code-server`) and `dagster-daemon` on the packaged local instance, whose run
launcher starts each run as a process of its own (stash_pipeline.run_launcher). A background
scoring run works (its worker held at a gate, as a long training would hold it); the code server
gets SIGTERM and stops while the run goes on; a new one starts on the same port and passes the
health check; the run finishes, nothing is scored twice, and the daemon makes its next runs
through the new server.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from stash_pipeline.dagster_runs.instance import get_instance
from stash_pipeline.dagster_runs.run_state import request_state
from stash_pipeline.defs.abandoned_runs import process_gone
from stash_pipeline.defs.scoring.sensors import BACKGROUND_TAG
from stash_pipeline.defs.worker_queue import run_with_tags, worker_holders
from stash_pipeline.run_launcher import FORKED, RUN_PROCESS_TAG
from stash_pipeline.services import scoring_requests
from stash_pipeline_tests.support.deployment import Deployment, health_check, release_scoring
from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, SERVER_START_S, bound, wait_until

pytestmark = pytest.mark.slow

@pytest.fixture
def deployment(home: Path, store, monkeypatch, shared_checkpoint) -> Iterator[Deployment]:
    """The release r1 and 4 of ana's traces pending for it (two background chunks of 2); the
    worker behind a gate; a code server and a daemon running."""
    with release_scoring(home, store, monkeypatch, shared_checkpoint, traces=4) as running:
        yield running


def test_a_code_server_replaced_while_a_run_works(deployment, store):
    instance = get_instance()
    assert type(instance.run_launcher).__name__ == "ProcessRunLauncher"  # the packaged instance
    wait_until(lambda: bool(worker_holders(instance)), timeout_s=SERVER_START_S * 3,
               what="a background chunk holding the worker")
    [working] = worker_holders(instance)
    run_process = instance.get_run_by_id(working).tags[RUN_PROCESS_TAG]
    old = deployment.processes.pop("code-server")

    # 1. SIGTERM: the old server stops while the run it launched nothing of goes on.
    old.send_signal(signal.SIGTERM)
    old.wait(timeout=bound(PROCESS_EXIT_S))
    assert old.returncode == 0, deployment.log("code-server")
    run = instance.get_run_by_id(working)
    assert run.status == dg.DagsterRunStatus.STARTED and not process_gone(run_process)
    unanswered = health_check(deployment.port)
    assert unanswered.returncode == 1 and "no answer" in unanswered.stderr, unanswered

    # 2. The new server on the same host and port, which the health check says serves.
    deployment.start_code_server()
    wait_until(lambda: health_check(deployment.port).returncode == 0, timeout_s=SERVER_START_S,
               what="the new code server to pass the health check")

    # 3. The run finishes; the daemon's next runs come through the new server.
    deployment.gate.touch()
    wait_until(lambda: instance.get_run_by_id(working).is_finished, timeout_s=PROCESS_EXIT_S,
               what="the run to finish")
    assert instance.get_run_by_id(working).is_success, deployment.log("daemon")
    trace_id = agentprocessbench_records(1)[0].trace.id
    request = scoring_requests.request(store, "ana", [trace_id])
    tags = scoring_requests.run_tags(request)
    wait_until(lambda: request_state(tags, instance)["status"] in ("succeeded", "failed"),
               timeout_s=PROCESS_EXIT_S, what="the Score again request made after the replacement")
    assert request_state(tags, instance)["status"] == "succeeded", deployment.log("daemon")
    # Its process was forked from the forker an earlier launch started (run_forker).
    events = instance.all_logs(run_with_tags(instance, tags).run_id)
    assert any(FORKED in (event.message or "") for event in events), deployment.log("daemon")
    wait_until(lambda: not store.scoring_work(personal=False, evaluator="r1", limit=10),
               timeout_s=PROCESS_EXIT_S, what="every trace scored by the release")

    # Nothing lost or done twice: each background chunk ran once and succeeded, each trace was
    # scored by one of them.
    def chunks() -> list[dg.DagsterRun]:
        return instance.get_runs(filters=dg.RunsFilter(tags={BACKGROUND_TAG: "r1"}))

    wait_until(lambda: all(r.is_finished for r in chunks()), timeout_s=PROCESS_EXIT_S,
               what="every background chunk to end")
    assert all(r.is_success for r in chunks()), [(r.run_id, r.status) for r in chunks()]
    scored = Counter(trace for r in chunks()
                     for trace in r.run_config["ops"]["trace_scores"]["config"]["trace_ids"])
    assert sorted(scored) == sorted(r.trace.id for r in agentprocessbench_records(4))
    assert set(scored.values()) == {1}, scored
    assert all(r.tags.get(RUN_PROCESS_TAG) for r in chunks())  # each a process of its own
