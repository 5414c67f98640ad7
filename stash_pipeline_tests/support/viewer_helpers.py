"""A scored world for the trace viewer's tests: two accounts, a shared release with action credit
on every action, a gate report, and a succeeded personal model with scores and a loss curve."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import httpx

from stash_pipeline.core.release_gate import BenchmarkOutcome, release_gate
from stash_pipeline.core.requests import parse_reward_model_request
from stash_pipeline.objects import reward_model_checkpoint_key
from stash_pipeline.services import accounts
from stash_pipeline.store import ActionScore, Release, TraceScore
from stash_pipeline_tests.support.api_helpers import Api, checkpoint_archive, import_traces

RELEASE = "20260101-000000-abcdef12"
TRACES = ("trace-a", "trace-b", "trace-c")


@dataclass
class World:
    alice_key: str
    bob_key: str
    bob_trace: str
    model_id: str


def scored_world(api: Api, tmp_path: Path) -> World:
    store = api.store
    alice, alice_key = accounts.create(store, "alice")
    bob, bob_key = accounts.create(store, "bob")
    assert import_traces(api.client(alice_key), *TRACES).status_code == 200
    assert import_traces(api.client(bob_key), "bob-trace").status_code == 200
    outcomes = [BenchmarkOutcome(f"p{i}", {"tool": "get_order", "domain": "retail",
                                           "agent": "support"}, candidate=i % 5 != 0)
                for i in range(40)]
    report = release_gate(outcomes, incumbent=None, reviewed_training_pairs=3,
                          scores_actions=True)
    store.save_benchmark_comparison(candidate=RELEASE, incumbent=None, passed=True, report=report)
    store.save_release(Release(RELEASE, "file:///nowhere", report, {"training_traces": {}}))
    for n, trace_id in enumerate(TRACES):
        trace = store.get_trace(trace_id)
        items = [ActionScore(a.id, trace.id, trace.version, RELEASE, raw=k - 1.0,
                             credit=math.tanh((k - 1.5 + n) / 2))
                 for k, a in enumerate(trace.actions())]
        store.save_action_scores(RELEASE, {trace.id: trace.version}, items)
    model = store.create_reward_model(alice.id, _request(TRACES[:2]))
    archive = tmp_path / "reward-model.tar.gz"
    archive.write_bytes(checkpoint_archive())
    attempt = store.mark_running(model.id)
    uri = api.objects.put_file(reward_model_checkpoint_key(model.id, attempt), archive)
    traces = [store.get_trace(t) for t in TRACES]
    store.mark_succeeded(
        model.id, metrics=METRICS, checkpoint_uri=uri,
        scores=[TraceScore(t.id, t.version, model.id, raw=0.5 - i, calibrated=0.5)
                for i, t in enumerate(traces)],
        scored={t.id: t.version for t in traces},
        action_scores=[ActionScore(a.id, t.id, t.version, model.id, raw=0.1, credit=-0.3)
                       for t in traces for a in t.actions()])
    return World(alice_key, bob_key, "bob-trace", model.id)


def whole_trace_only(api: Api, world: World) -> tuple[str, str]:
    """trace-d of alice's with the release's action credit, and a personal model of hers that
    scored it as a whole only (raw 0.25, calibrated 0.6): (trace id, model id)."""
    store = api.store
    assert import_traces(api.client(world.alice_key), "trace-d").status_code == 200
    trace = store.get_trace("trace-d")
    store.save_action_scores(RELEASE, {trace.id: trace.version}, [
        ActionScore(a.id, trace.id, trace.version, RELEASE, raw=0.0, credit=0.4)
        for a in trace.actions()])
    owner = store.get_reward_model(world.model_id).owner
    model = store.create_reward_model(owner, parse_reward_model_request(
        {"name": "whole traces only", "trace_ids": [trace.id]}))
    store.mark_running(model.id)
    store.mark_succeeded(model.id, metrics=METRICS, checkpoint_uri="file:///nowhere",
                         scores=[TraceScore(trace.id, trace.version, model.id, raw=0.25,
                                            calibrated=0.6)],
                         scored={trace.id: trace.version})
    return trace.id, model.id


METRICS = {"train_pairs": 8, "eval_pairs": 0, "eval_accuracy": None, "final_loss": 0.61,
           "epochs": 1, "device": "cpu", "seconds": 3.2, "excluded_cross_trace_pairs": 1,
           "phases": {"inputs": 0.1, "training": 2.5, "scoring": 0.4},
           "loss_curve": [0.69 - 0.01 * i for i in range(30)]}


def _request(trace_ids: tuple[str, ...]):
    return parse_reward_model_request({"name": "first personal model",
                                       "trace_ids": list(trace_ids)})


def running_model(api: Api, world: World, run_id: str) -> str:
    """A second model of alice's, running as Dagster run ``run_id``."""
    owner = api.store.get_reward_model(world.model_id).owner
    model = api.store.create_reward_model(owner, _request(TRACES[:2]))
    api.store.mark_running(model.id, run_id)
    return model.id


def report_progress(run_id: str, *messages: str) -> None:
    """Log events of run ``run_id`` on the test's Dagster instance ($STASH_HOME/dagster, as the
    served API reads it), as the worker's Pipes messages arrive; ``STEP_START name`` is Dagster's
    start of step ``name``."""
    import time

    import dagster as dg

    from stash_pipeline.dagster_runs.instance import get_instance

    instance = get_instance()
    for message in messages:
        step = message.removeprefix("STEP_START ") if message.startswith("STEP_START ") \
            else None
        event = None if step is None else dg.DagsterEvent(
            event_type_value=dg.DagsterEventType.STEP_START.value,
            job_name="personal_reward_model_training", step_key=step)
        instance.store_event(dg.EventLogEntry(
            error_info=None, level=20, user_message="" if step else message, run_id=run_id,
            timestamp=time.time(), dagster_event=event, step_key=step,
            job_name="personal_reward_model_training"))


@dataclass
class AirlineWorld:
    """Seventy real tau2-bench airline traces of alice's (two agents' runs over the same tasks,
    verified outcomes included), scored by a release and a personal model with made-up but
    fixed numbers, and a comparison ana filed."""

    alice_key: str
    trace_ids: list[str]
    model_id: str
    comparison_id: str


def airline_world(api: Api, tmp_path: Path) -> AirlineWorld:
    from stash_pipeline.core.feedback import ReviewedComparison, feedback_id
    from stash_pipeline.services import traces as trace_service
    from stash_pipeline_tests.support.tiny_models import TAU2_RUNS

    store = api.store
    alice, alice_key = accounts.create(store, "alice")
    ids = [trace_id for run in ("airline_gpt-4o_azure.json", "airline_gpt-4.1.json")
           for trace_id in trace_service.import_file(store, alice.id,
                                                     TAU2_RUNS / run)["trace_ids"]]
    report = release_gate([BenchmarkOutcome(f"p{i}", {"tool": "book_reservation",
                                                      "domain": "airline", "agent": "gpt-4.1"},
                                            candidate=i % 4 != 0) for i in range(40)],
                          incumbent=None, reviewed_training_pairs=3, scores_actions=True)
    store.save_benchmark_comparison(candidate=RELEASE, incumbent=None, passed=True,
                                    report=report)
    store.save_release(Release(RELEASE, "file:///nowhere", report, {"training_traces": {}}))
    model = store.create_reward_model(alice.id, _request(tuple(ids[:10])))
    archive = tmp_path / "reward-model.tar.gz"
    archive.write_bytes(checkpoint_archive())
    attempt = store.mark_running(model.id)
    uri = api.objects.put_file(reward_model_checkpoint_key(model.id, attempt), archive)
    stored = store.get_traces(ids)
    for n, trace in enumerate(stored):
        store.save_action_scores(RELEASE, {trace.id: trace.version}, [
            ActionScore(a.id, trace.id, trace.version, RELEASE, raw=math.sin(n + k),
                        credit=math.tanh(math.sin(1.3 * n + 0.7 * k) + 0.2))
            for k, a in enumerate(trace.actions())])
    store.mark_succeeded(
        model.id, metrics=METRICS, checkpoint_uri=uri,
        scores=[TraceScore(t.id, t.version, model.id, raw=math.cos(2.1 * n),
                           calibrated=0.5 + 0.45 * math.cos(2.1 * n))
                for n, t in enumerate(stored)],
        scored={t.id: t.version for t in stored},
        action_scores=[ActionScore(a.id, t.id, t.version, model.id, raw=0.0,
                                   credit=math.tanh(math.cos(0.9 * n + 1.1 * k)))
                       for n, t in enumerate(stored) for k, a in enumerate(t.actions())])
    chosen, rejected = ids[:2]
    comparison = ReviewedComparison(feedback_id("comparison", chosen, rejected, "ana"), chosen,
                                    rejected, status="pending", author="ana",
                                    rationale="it checked the membership before rebooking")
    store.add_feedback([comparison], owner=alice.id)
    return AirlineWorld(alice_key, ids, model.id, comparison.id)


def login(api: Api, key: str) -> httpx.Client:
    client = api.client()
    response = client.post("/ui/login", data={"api_key": key, "next": "/ui/traces"})
    assert response.status_code == 303 and response.headers["location"] == "/ui/traces"
    return client


def csrf(page: str) -> str:
    return re.search(r'name="csrf" value="([0-9a-f]{64})"', page).group(1)


def error_of(page: str, element: str) -> str:
    found = re.search(rf'id="{element}"[^>]*>([^<]*)<', page)
    assert found, page
    return found.group(1)


def scoring_run(run_id: str, request_id: str | None = None, *, to: str = "queued",
                reason: str = "") -> None:
    """Score again run ``run_id`` (request ``request_id``'s, by its tag) on the test's Dagster
    instance, as the request sensor makes it: ``queued`` (made, waiting for the worker behind
    the runs made before it), ``running`` (its worker step started) or ``failed`` (``reason``)."""
    import dagster as dg

    from stash_pipeline.dagster_runs.instance import get_instance
    from stash_pipeline.defs.worker_queue import priority_tags
    from stash_pipeline.pipelines.trace_scoring import SCORING_REQUEST_TAG
    from stash_pipeline_tests.support.dagster_storage import queued_run_origin

    instance = get_instance()
    run = instance.get_run_by_id(run_id)
    if run is None:
        tags = {**priority_tags("request"),
                **({SCORING_REQUEST_TAG: str(request_id)} if request_id is not None else {})}
        run = instance.add_run(dg.DagsterRun(job_name="trace_scoring", run_id=run_id,
                                             status=dg.DagsterRunStatus.QUEUED, tags=tags,
                                             remote_job_origin=queued_run_origin("trace_scoring")))
    if to == "running":
        instance.report_dagster_event(dg.DagsterEvent(
            event_type_value=dg.DagsterEventType.RUN_START.value, job_name="trace_scoring"),
            run_id=run_id)
        report_progress(run_id, "STEP_START trace_scores")
    elif to == "failed":
        instance.report_run_failed(instance.get_run_by_id(run_id), reason)
