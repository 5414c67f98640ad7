"""Requested work first (issue 43): every sensor's runs carry their priority, background scoring
comes in chunks of STASH_SCORING_BATCH, a waiting run knows how many runs are ahead of it, and a
request or model whose run failed before it started says why."""

from __future__ import annotations

import json

import dagster as dg
import pytest
from dagster._core.events import EngineEventData
from dagster._utils.error import SerializableErrorInfo

from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.dagster_runs.run_state import model_wait, request_state
from stash_pipeline.defs.personal.partitions import ATTEMPT_TAG, MODEL_TAG
from stash_pipeline.defs.resources import DEFAULT_SCORING_BATCH
from stash_pipeline.defs.worker_queue import (
    PRIORITY_TAG,
    REWARD_POOL,
    priority_tags,
    request_wait,
    worker_wait,
)
from stash_pipeline.pipelines.trace_scoring import SCORING_REQUEST_TAG
from stash_pipeline.services import reward_models
from stash_pipeline.store import Release, Store
from stash_pipeline_tests.support.dagster_storage import queued_run_origin
from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records

POOLS = {"concurrency": {"pools": {"default_limit": 1, "granularity": "op"}}}


def tick(instance: dg.DagsterInstance, name: str) -> list[dg.RunRequest]:
    defs = definitions()
    with dg.build_sensor_context(instance=instance, definitions=defs,
                                 instance_ref=instance.get_ref(), resources=defs.resources,
                                 sensor_name=name) as context:
        return list(defs.resolve_sensor_def(name).evaluate_tick(context).run_requests or [])


def succeeded_model(store: Store, trace_ids: list[str]) -> str:
    model = reward_models.create(store, "ana", {"name": "m", "trace_ids": trace_ids})
    store.mark_running(model.id)
    store.mark_succeeded(model.id, metrics={"action_scoring_version": None},
                         checkpoint_uri="file:///nowhere")
    return model.id


@pytest.fixture
def pools_instance():
    """A test instance whose pools have the limit of dagster_local.yaml (one)."""
    with dg.instance_for_test(overrides=POOLS) as instance:
        yield instance


def test_requests_run_before_background_work_and_background_comes_in_chunks(
        store, pools_instance, monkeypatch):
    instance = pools_instance
    monkeypatch.setenv("STASH_SCORING_BATCH", "2")
    records = agentprocessbench_records(7)
    store.import_traces(records[:2])
    ids = [r.trace.id for r in records]
    queued = reward_models.create(store, "ana", {"name": "q", "trace_ids": ids[:2]})
    model_id = succeeded_model(store, ids[:2])
    store.import_traces(records[2:])  # imported after the model succeeded: auto-scored
    reward_models.score_again(store, "ana", model_id)
    store.request_scoring(owner="ana", evaluator=model_id, traces={ids[0]: 1}, actions=False)
    store.save_release(Release("r1", "file:///nowhere", {"passed": True},
                               {"training_traces": {}, "benchmark_traces": {}}))

    request, background = priority_tags("request"), priority_tags("background")
    assert request == {PRIORITY_TAG: "10"} and background == {PRIORITY_TAG: "-10"}
    [training] = tick(instance, "queued_reward_models")
    assert training.tags[PRIORITY_TAG] == "10" and training.tags[MODEL_TAG] == queued.id
    for name in ("score_again_requests", "score_again_for_traces"):
        [run] = tick(instance, name)
        assert run.tags[PRIORITY_TAG] == "10", name
    assert REWARD_POOL not in instance.event_log_storage.get_concurrency_keys()
    chunks = tick(instance, "pending_scoring")
    assert chunks and {r.tags[PRIORITY_TAG] for r in chunks} == {"-10"}
    configs = [r.run_config["ops"]["trace_scores"]["config"] for r in chunks]
    # STASH_SCORING_BATCH traces a run, two runs in flight: the personal model's work first.
    assert [(c["evaluator"], len(c["trace_ids"])) for c in configs] == [(model_id, 2)] * 2
    # The pool exists before its first run: the run queue then holds back a second chunk.
    assert REWARD_POOL in instance.event_log_storage.get_concurrency_keys()
    assert DEFAULT_SCORING_BATCH == 50
    schedule = definitions().resolve_schedule_def("weekly_shared_evaluator")
    assert schedule.tags[PRIORITY_TAG] == "0"


def add_run(instance: dg.DagsterInstance, run_id: str, kind: str, *,
            status=dg.DagsterRunStatus.QUEUED, job: str = "trace_scoring",
            tags: dict | None = None) -> dg.DagsterRun:
    """A run as a sensor's request makes it (a queued run names the code it comes from)."""
    return instance.add_run(dg.DagsterRun(job_name=job, run_id=run_id, status=status,
                                          tags={**priority_tags(kind), **(tags or {})},
                                          remote_job_origin=queued_run_origin(job)))


def test_a_waiting_run_counts_the_runs_ahead_of_it():
    with dg.instance_for_test(overrides=POOLS) as instance:
        storage = instance.event_log_storage
        storage.initialize_concurrency_limit_to_default(REWARD_POOL)
        add_run(instance, "chunk-1", "background", status=dg.DagsterRunStatus.STARTED)
        assert storage.claim_concurrency_slot(REWARD_POOL, "chunk-1", "trace_scores").is_claimed
        add_run(instance, "chunk-2", "background")
        add_run(instance, "request-1", "request")
        add_run(instance, "chunk-3", "background")
        add_run(instance, "request-2", "request", job="personal_reward_model_training",
                status=dg.DagsterRunStatus.STARTED)
        add_run(instance, "elsewhere", "request", job="some_other_job")
        add_run(instance, "done", "request", status=dg.DagsterRunStatus.SUCCESS)

        def ahead(run_id: str) -> int | None:
            wait = worker_wait(instance, run_id)
            return None if wait is None else wait.runs_ahead

        # The chunk holding the worker is ahead of everyone; requests pass the queued chunks.
        assert ahead("request-1") == 1
        assert ahead("request-2") == 2
        assert ahead("chunk-2") == 3 and ahead("chunk-3") == 4
        assert ahead("chunk-1") is None  # it holds the worker
        assert ahead("done") is None and ahead("elsewhere") is None
        assert worker_wait(instance, "request-1").text() == "waiting for the worker: 1 run ahead"
        storage.free_concurrency_slots_for_run("chunk-1")
        instance.report_run_canceled(instance.get_run_by_id("chunk-1"))
        assert ahead("request-1") == 0 and ahead("chunk-2") == 2

        # A request whose run is not made yet waits for it; a model finds its run by its tags.
        assert request_wait(instance, {SCORING_REQUEST_TAG: "7"}).waiting_for == "run"
        add_run(instance, "request-7", "request", tags={SCORING_REQUEST_TAG: "7"})
        state = request_state({SCORING_REQUEST_TAG: "7"}, instance)
        assert state["status"] == "queued" and state["run_id"] == "request-7"
        assert state["wait"] == {"waiting_for": "worker", "runs_ahead": 2, "run_id": "request-7",
                                 "text": "waiting for the worker: 2 runs ahead"}
        assert storage.claim_concurrency_slot(REWARD_POOL, "request-7",
                                              "trace_scores").is_claimed
        assert request_state({SCORING_REQUEST_TAG: "7"}, instance)["status"] == "running"


class Model:
    def __init__(self, status: str, run_id: str | None = None):
        self.id, self.status, self.attempt, self.run_id = "m1", status, 1, run_id


def test_a_queued_model_says_what_it_waits_for():
    with dg.instance_for_test(overrides=POOLS) as instance:
        instance.event_log_storage.initialize_concurrency_limit_to_default(REWARD_POOL)
        assert model_wait(Model("queued"), instance)["waiting_for"] == "run"
        add_run(instance, "holder", "background", status=dg.DagsterRunStatus.STARTED)
        instance.event_log_storage.claim_concurrency_slot(REWARD_POOL, "holder", "trace_scores")
        add_run(instance, "training", "request", job="personal_reward_model_training",
                tags={MODEL_TAG: "m1", ATTEMPT_TAG: "1"})
        assert model_wait(Model("queued"), instance)["runs_ahead"] == 1  # found by its tags
        assert model_wait(Model("queued", "training"), instance)["runs_ahead"] == 1
        assert model_wait(Model("running", "training"), instance) is None


def unreachable(instance: dg.DagsterInstance, run: dg.DagsterRun) -> None:
    """What the run queue's daemon does to a run whose code server stays away past its retries."""
    error = SerializableErrorInfo("DagsterUserCodeUnreachableError: Could not reach user code "
                                  "server. gRPC Error code: UNAVAILABLE", [], None)
    instance.report_engine_event("Run dequeue failed to reach the user code server after 3 "
                                 "attempts, failing run", run, EngineEventData.engine_error(error))
    instance.report_run_failed(run)


def test_a_request_whose_run_failed_before_it_started_reads_failed_with_the_reason():
    with dg.instance_for_test() as instance:
        run = add_run(instance, "request-3", "request", tags={SCORING_REQUEST_TAG: "3"})
        unreachable(instance, run)
        state = request_state({SCORING_REQUEST_TAG: "3"}, instance)
        assert state["status"] == "failed" and state["wait"] is None
        assert state["error"].startswith("Run dequeue failed to reach the user code server")
        assert "Could not reach user code server" in state["error"]


def test_a_model_whose_run_failed_before_it_started_is_failed_with_the_reason(store, instance):
    from stash_pipeline.defs.personal.sensors import failed_reward_model_runs

    records = agentprocessbench_records(2)
    store.import_traces(records)
    model = reward_models.create(store, "ana", {"name": "m",
                                                "trace_ids": [r.trace.id for r in records]})
    run = add_run(instance, "training-1", "request", job="personal_reward_model_training",
                  tags={"dagster/partition": f"m--{model.id}", MODEL_TAG: model.id,
                        ATTEMPT_TAG: "1"})
    unreachable(instance, run)
    [event] = [r.event_log_entry.dagster_event for r in instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records]
    defs = definitions()
    failed_reward_model_runs(dg.build_run_status_sensor_context(
        sensor_name="failed_reward_model_runs", dagster_event=event, dagster_instance=instance,
        dagster_run=instance.get_run_by_id(run.run_id), resources=defs.resources,
    ).for_run_failure())
    failed = store.get_reward_model(model.id)
    assert failed.status == "failed"
    assert "Could not reach user code server" in failed.error
    assert "run training-1 failed: Run dequeue failed" in failed.error


def test_a_retried_launch_leaves_the_request_queued():
    """The coordinator re-enqueues a run it could not launch: the request still waits."""
    with dg.instance_for_test() as instance:
        run = add_run(instance, "request-4", "request", tags={SCORING_REQUEST_TAG: "4"})
        instance.report_engine_event("Run dequeue failed to reach the user code server, "
                                     "re-submitting the run into the queue", run)
        instance.report_dagster_event(dg.DagsterEvent.job_enqueue(run), run_id=run.run_id)
        state = request_state({SCORING_REQUEST_TAG: "4"}, instance)
        assert (state["status"], state["error"]) == ("queued", None)


def test_the_viewer_says_what_a_queued_model_waits_for():
    from stash_pipeline.api.ui.progress import progress_text

    worker = {"waiting_for": "worker", "runs_ahead": 2}
    assert progress_text("queued", None, worker) == "Waiting for the worker: 2 runs ahead."
    assert progress_text("queued", None, {"waiting_for": "run", "runs_ahead": None}) == \
        "Waiting for the pipeline to start its run."
    assert progress_text("queued", None, {**worker, "runs_ahead": 1}) == \
        "Waiting for the worker: 1 run ahead."  # issue 52.6


def test_rm_show_says_what_a_queued_model_waits_for(store, capsys):
    from stash_pipeline.cli import main

    records = agentprocessbench_records(2)
    store.import_traces(records)
    model = reward_models.create(store, "ana", {"name": "m",
                                                "trace_ids": [r.trace.id for r in records]})
    assert main(["rm", "show", model.id, "--owner", "ana"]) == 0
    assert "waiting for the pipeline to start its run" in capsys.readouterr().out
    assert main(["rm", "show", model.id, "--owner", "ana", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert shown["status"] == "queued" and shown["wait"]["waiting_for"] == "run"
