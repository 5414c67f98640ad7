"""A personal reward model end to end on a test instance: the sensor, the partitioned assets, the
worker through Pipes, and the store's status, metrics and scores."""

from __future__ import annotations

import dataclasses
import math
import tarfile
from pathlib import Path

import dagster as dg
import pytest

from stash_pipeline.compute.contract import job_directory
from stash_pipeline.compute.worker_log import LOG, PHASES
from stash_pipeline.core.failures import hide_server_paths
from stash_pipeline.dagster_runs.in_process import run_sensor_requests
from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.defs.personal.sensors import queued_reward_models
from stash_pipeline.objects.keys import reward_model_checkpoint_key
from stash_pipeline.pipelines import personal_training
from stash_pipeline.pipelines.personal_training import attempt_name
from stash_pipeline.services import reward_models, trust as trust_service
from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records, request

METRIC_FIELDS = {"train_pairs", "eval_pairs", "eval_accuracy", "action_scoring_version",
                 "action_train_pairs", "action_eval_pairs", "action_eval_accuracy",
                 "tool_eval_pairs", "tool_eval_accuracy", "excluded_cross_trace_pairs",
                 "final_loss", "epochs", "device", "seconds"}


@pytest.mark.slow
def test_a_queued_model_trains_scores_every_owned_trace_and_succeeds(store, instance,
                                                                    pipeline_base_model):
    records = agentprocessbench_records(8)
    store.import_traces(records)
    selected = [r.trace.id for r in records[:6]]  # two traces are the owner's but not selected
    model_id = request(store, selected, str(pipeline_base_model))
    defs = definitions()

    runs = run_sensor_requests(instance, defs, "queued_reward_models")
    assert [run.status for run in runs] == [dg.DagsterRunStatus.SUCCESS]

    model = store.get_reward_model(model_id)
    assert model.status == "succeeded", model.error
    assert (model.attempt, model.run_id) == (1, runs[0].run_id)
    assert model.started_at <= model.finished_at
    # The seed's fields (num_pairs among them), and the worker's own: the attempt that wrote them,
    # its phases' seconds, why evaluation is unavailable (null here), the window and template used,
    # and the loss curve the viewer draws.
    assert set(model.metrics) == METRIC_FIELDS | {
        "attempt", "phases", "num_pairs", "eval_unavailable_reason", "max_length",
        "chat_template", "loss_curve", "truncated_pairs", "eval_slices", "truncated_traces",
        "truncated_actions"}
    assert set(model.metrics["phases"]) <= set(PHASES)
    assert model.metrics["device"] == "cpu" and model.metrics["epochs"] == 1
    # Only the request's traces supply pairs; every trace of the owner is scored.
    pairs = store.load_pairs(reward_model_id=model_id)
    assert pairs and {t for p in pairs for t in p.source_trace_ids} <= set(selected)
    assert model.metrics["train_pairs"] == len(store.load_pairs(reward_model_id=model_id,
                                                                split="train"))
    for record in records:
        [score] = [s for s in store.scores_for(record.trace.id) if s.evaluator == model_id]
        assert math.isfinite(score.raw) and 0 < score.calibrated < 1
    credits = [a.credit for r in records for a in store.action_scores_for(r.trace.id, model_id)]
    assert model.metrics["action_scoring_version"] == 1 and credits
    assert all(-1 <= c <= 1 for c in credits)
    # The checkpoint is the seed's archive, in the local object store.
    assert model.checkpoint_uri.startswith("file://")
    with tarfile.open(model.checkpoint_uri.removeprefix("file://")) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"config.json", "model.safetensors", "tokenizer.json", "reward_stats.json",
            "action_reward_stats.json"} <= names
    # Lineage and metadata a person reads in the UI.
    for key in ("personal_pairs", "personal_split", "personal_checkpoint", "personal_scores"):
        [event] = instance.fetch_materializations(dg.AssetKey(key), limit=10).records
        assert event.partition_key == f"hotpot--{model_id}"  # the model's name, then its id
    checkpoint = instance.fetch_materializations(dg.AssetKey("personal_checkpoint"), limit=1)
    metadata = checkpoint.records[0].asset_materialization.metadata
    assert {"checkpoint_uri", "metrics", "loss_curve", "final_loss"} <= set(metadata)
    # How far to trust it: the checkpoint's held-out part, then its report on the owner's traces.
    assert {"trust", "trust_figures"} <= set(metadata)
    scores = instance.fetch_materializations(dg.AssetKey("personal_scores"), limit=1)
    shown = scores.records[0].asset_materialization.metadata
    assert {"score_histogram", "top_traces", "bottom_traces", "trust", "trust_figures"} <= set(
        shown)
    assert f"How far to trust {model_id}" in shown["trust"].value
    # The report the step saved, unchanged since.
    saved = trust_service.report(store, "ana", model_id)
    assert saved["traces"]["trained_on_left_out"] > 0
    assert len(shown["trust_figures"].value.splitlines()) == 2 + len(saved["figures"])
    # Nothing is left queued: another tick asks for nothing.
    assert run_sensor_requests(instance, defs, "queued_reward_models") == []


TRAINING_STEPS = [dg.AssetKey(name) for name in
                  ("personal_pairs", "personal_split", "personal_checkpoint")]


@pytest.mark.slow
def test_personal_scores_alone_in_a_fresh_scratch_succeeds_the_model(store, instance,
                                                                     pipeline_base_model, home,
                                                                     monkeypatch):
    """``personal_scores`` run on its own, as a re-execution from failure or a step launcher
    runs it: another run, in a new scratch directory (RM_ARTIFACT_DIR), after
    ``personal_checkpoint`` succeeded. What it stores comes through the object store."""
    records = agentprocessbench_records(6)
    store.import_traces(records)
    model_id = request(store, [r.trace.id for r in records], str(pipeline_base_model))
    instance.add_dynamic_partitions("personal_reward_model", [model_id])
    job = definitions().resolve_job_def("personal_reward_model_training")
    trained = job.execute_in_process(instance=instance, partition_key=model_id,
                                     asset_selection=TRAINING_STEPS)
    assert trained.success
    assert store.get_reward_model(model_id).status == "running"
    first_scratch = job_directory(home / "jobs", model_id, attempt_name(1))
    assert [p.name for p in first_scratch.iterdir()] == [LOG]  # nothing left to read there

    fresh = home / "fresh-scratch"
    monkeypatch.setenv("RM_ARTIFACT_DIR", str(fresh))
    scored = job.execute_in_process(instance=instance, partition_key=model_id,
                                    asset_selection=[dg.AssetKey("personal_scores")])
    assert scored.success
    model = store.get_reward_model(model_id)
    assert model.status == "succeeded", model.error
    checkpoint = instance.fetch_materializations(dg.AssetKey("personal_checkpoint"), limit=1)
    shown = checkpoint.records[0].asset_materialization.metadata  # the training step's metrics
    assert model.metrics["train_pairs"] == shown["train_pairs"].value > 0
    assert model.metrics["seconds"] == shown["seconds"].value  # the upload's seconds included
    assert model.metrics["action_scoring_version"] == 1
    assert model.checkpoint_uri.endswith(f"{model_id}/attempt-1/reward-model.tar.gz")
    assert Path(model.checkpoint_uri.removeprefix("file://")).is_file()
    for record in records:
        [score] = [s for s in store.scores_for(record.trace.id) if s.evaluator == model_id]
        assert math.isfinite(score.raw) and 0 < score.calibrated < 1
    assert [a for r in records for a in store.action_scores_for(r.trace.id, model_id)]
    assert not list(fresh.rglob("*.*"))  # it wrote no job of its own
    # The hand-over goes once its rows are stored: only the archive stays in the object store.
    objects = [p.name for p in (home / "stash" / "objects").rglob("*") if p.is_file()]
    assert objects == ["reward-model.tar.gz"]


def test_too_few_pairs_fail_before_the_base_model_is_loaded(store, instance):
    records = agentprocessbench_records(1)
    store.import_traces(records)
    # No ratings at all on this copy: strip the feedback.
    store_ids = [records[0].trace.id]
    with store.transaction() as connection:
        from stash_pipeline.store import schema
        connection.execute(schema.ratings.delete())
    model_id = request(store, store_ids, "/nonexistent/base-model")
    runs = run_sensor_requests(instance, definitions(), "queued_reward_models")
    assert runs[0].status == dg.DagsterRunStatus.FAILURE
    model = store.get_reward_model(model_id)
    assert model.status == "failed" and "at least 2 usable pairs, found 0" in model.error
    assert "nonexistent" not in model.error and model.checkpoint_uri is None


def test_a_worker_failure_keeps_the_log_tail_and_no_checkpoint(store, instance, home):
    records = agentprocessbench_records(4)
    store.import_traces(records)
    model_id = request(store, [r.trace.id for r in records], str(home / "no-such-model"))
    runs = run_sensor_requests(instance, definitions(), "queued_reward_models")
    assert runs[0].status == dg.DagsterRunStatus.FAILURE
    model = store.get_reward_model(model_id)
    job_dir = job_directory(home / "jobs", model_id, attempt_name(1))
    log = (job_dir / LOG).read_text()
    assert model.status == "failed" and model.error == hide_server_paths(log.rstrip())[-2000:]
    assert str(home) in log and str(home) not in model.error  # the operator's log keeps paths
    assert ".../no-such-model" in model.error and model.checkpoint_uri is None
    assert not list((home / "stash" / "objects").rglob("*.tar.gz"))
    assert [p.name for p in job_dir.iterdir()] == [LOG]  # a finished attempt keeps its log only


def test_the_sensor_asks_once_per_attempt_and_a_retry_is_never_blocked(store, instance):
    records = agentprocessbench_records(2)
    store.import_traces(records)
    model_id = request(store, [r.trace.id for r in records], "/nonexistent")
    defs = definitions()
    context = dg.build_sensor_context(instance=instance, definitions=defs,
                                      instance_ref=instance.get_ref(), resources=defs.resources,
                                      sensor_name="queued_reward_models")
    first = queued_reward_models.evaluate_tick(context)
    key = f"hotpot--{model_id}"
    assert [(r.partition_key, r.run_key) for r in first.run_requests] == [(key, f"{model_id}:1")]
    assert first.dynamic_partitions_requests[0].partition_keys == [key]
    store.mark_running(model_id, "run-1")
    store.mark_failed(model_id, "worker killed (signal 9)")
    assert queued_reward_models.evaluate_tick(context).run_requests == []
    reward_models.retry(store, "ana", model_id)
    instance.add_dynamic_partitions("personal_reward_model", [key])
    again = queued_reward_models.evaluate_tick(context)
    assert [r.run_key for r in again.run_requests] == [f"{model_id}:2"]
    assert again.dynamic_partitions_requests == []


@pytest.mark.parametrize("named", [True, False], ids=["named-key", "bare-id-key"])
def test_a_run_that_dies_outside_the_worker_fails_its_model(store, instance, home, named):
    """Its partition key names the model, or is the bare id of a run from before keys did."""
    from stash_pipeline.defs.personal.sensors import failed_reward_model_runs

    records = agentprocessbench_records(2)
    store.import_traces(records)
    model_id = request(store, [r.trace.id for r in records], "/nonexistent")
    key = f"hotpot--{model_id}" if named else model_id
    job = definitions().resolve_job_def("personal_reward_model_training")
    instance.add_dynamic_partitions("personal_reward_model", [key])
    run = instance.create_run_for_job(job, tags={"dagster/partition": key})
    store.mark_running(model_id, run.run_id)
    instance.report_run_failed(run)
    event = next(record.event_log_entry.dagster_event for record in instance.get_records_for_run(
        run.run_id).records if record.event_log_entry.dagster_event
        and record.event_log_entry.dagster_event.event_type == dg.DagsterEventType.RUN_FAILURE)
    defs = definitions()
    context = dg.build_run_status_sensor_context(
        sensor_name="failed_reward_model_runs", dagster_event=event, dagster_instance=instance,
        dagster_run=instance.get_run_by_id(run.run_id), resources=defs.resources,
    ).for_run_failure()
    failed_reward_model_runs(context)
    model = store.get_reward_model(model_id)
    assert model.status == "failed" and f"run {run.run_id} failed" in model.error
    # A run of another attempt (or a duplicate) never speaks for the model.
    reward_models.retry(store, "ana", model_id)
    failed_reward_model_runs(context)
    assert store.get_reward_model(model_id).status == "queued"


def _kill_worker_when_training(job_dir, stop) -> list[int]:
    """kill -9 the worker process of ``job_dir`` once its log shows a training step."""
    import os
    import signal
    import time
    from pathlib import Path

    killed: list[int] = []
    while not stop.is_set() and not killed:
        log = job_dir / LOG
        if log.is_file() and "step 1/" in log.read_text(errors="replace"):
            for proc in Path("/proc").iterdir():
                try:
                    command = (proc / "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"stash_pipeline.worker" in command and str(job_dir).encode() in command:
                    os.kill(int(proc.name), signal.SIGKILL)
                    killed.append(int(proc.name))
        time.sleep(0.01)
    return killed


@pytest.mark.slow
@pytest.mark.worker_process  # kill -9 needs a worker process to kill
def test_a_worker_killed_mid_training_fails_the_model_with_the_log_and_the_signal(
        store, instance, pipeline_base_model, home):
    import threading

    records = agentprocessbench_records(6)
    store.import_traces(records)
    model_id = request(store, [r.trace.id for r in records], str(pipeline_base_model), epochs=50)
    job_dir = job_directory(home / "jobs", model_id, attempt_name(1))
    stop, killed = threading.Event(), []
    watcher = threading.Thread(
        target=lambda: killed.extend(_kill_worker_when_training(job_dir, stop)))
    watcher.start()
    try:
        runs = run_sensor_requests(instance, definitions(), "queued_reward_models")
    finally:
        stop.set()
        watcher.join()
    assert killed and runs[0].status == dg.DagsterRunStatus.FAILURE
    model = store.get_reward_model(model_id)
    assert model.status == "failed" and model.checkpoint_uri is None
    assert model.error.rstrip().endswith("worker killed (signal 9)")
    assert "step 1/" in model.error  # the log's tail: how far training got
    assert not list((home / "stash" / "objects").rglob("*.tar.gz"))


@pytest.mark.slow
def test_a_reimport_that_orphans_feedback_still_trains(store, instance, pipeline_base_model):
    """Ratings on actions a shorter reimport removed are kept, left out of pairs and counted."""
    records = agentprocessbench_records(6)
    store.import_traces(records)
    shortened = records[0]
    rated = {r.action_id for r in store.feedback_for([shortened.trace.id])
             if getattr(r, "action_id", None)}
    last = max(a.message_index for a in shortened.trace.actions() if a.id in rated)
    cut = dataclasses.replace(shortened.trace, messages=shortened.trace.messages[:last])
    store.import_traces([dataclasses.replace(shortened, trace=cut, feedback=())])
    assert store.orphaned_feedback(owner="ana")

    model_id = request(store, [r.trace.id for r in records], str(pipeline_base_model))
    runs = run_sensor_requests(instance, definitions(), "queued_reward_models")
    assert runs[0].status == dg.DagsterRunStatus.SUCCESS
    assert store.get_reward_model(model_id).status == "succeeded"
    pairs = instance.fetch_materializations(dg.AssetKey("personal_pairs"), limit=1)
    metadata = pairs.records[0].asset_materialization.metadata
    assert metadata["orphaned_feedback"].value > 0


@pytest.mark.slow
def test_worker_log_has_every_phase_with_its_duration(store, instance, pipeline_base_model, home):
    from stash_pipeline.compute.worker_log import phase_seconds

    records = agentprocessbench_records(4)
    store.import_traces(records)
    model_id = request(store, [r.trace.id for r in records], str(pipeline_base_model))
    run_sensor_requests(instance, definitions(), "queued_reward_models")
    assert store.get_reward_model(model_id).status == "succeeded"
    job_dir = job_directory(home / "jobs", model_id, attempt_name(1))
    assert [p.name for p in job_dir.iterdir()] == [LOG]  # no weights left for anyone to read
    log = (job_dir / LOG).read_text()
    assert set(phase_seconds(log)) >= {"inputs", "load", "training", "evaluation", "save",
                                       "archive", "scoring", "upload", "extraction"}


@pytest.mark.slow
def test_score_again_uses_the_audience_the_checkpoint_was_trained_for(store, instance,
                                                                     tiny_base_model, home):
    """A shared-audience checkpoint rescored: the same scores as when it was trained (today's
    bug was a scoring-only job defaulting to the personal rendering)."""
    from stash_pipeline.compute.contract import ARCHIVE_NAME, JobSettings, write_job
    from stash_pipeline.compute.worker_log import failure_reason
    from stash_pipeline.importers import read_path
    from stash_pipeline.objects import object_store_from_env
    from stash_pipeline.pipelines.worker_io import read_results
    from stash_pipeline.worker.runner import main
    from stash_pipeline.worker.scoring import RewardModel

    # Short traces with a system turn: the shared rendering (system instructions kept) differs
    # from the personal one inside the 1024-token window.
    samples = (Path(__file__).resolve().parents[2] / "stash_pipeline" / "samples"
               / "travel-agent.jsonl")
    records = [dataclasses.replace(r, feedback=()) for r in read_path(samples, owner="ana")][:3]
    store.import_traces(records)
    stored = store.get_traces([r.trace.id for r in records])
    model = reward_models.create(store, "ana",
                                 {"name": "shared-view", "trace_ids": [t.id for t in stored],
                                                "base_model": str(tiny_base_model)})
    pairs = _trace_pairs(stored)
    job_dir = home / "shared-job"
    write_job(job_dir, JobSettings(evaluator=model.id, audience="shared",
                                   base_model=str(tiny_base_model)),
              train_pairs=pairs, score_traces=stored)
    assert main(str(job_dir)) == 0, failure_reason(job_dir)
    trained = read_results(job_dir, model.id)
    objects = object_store_from_env()
    uri = objects.put_file(reward_model_checkpoint_key(model.id, attempt_name(1)),
                           job_dir / ARCHIVE_NAME)
    store.mark_running(model.id, "run-0")
    personal_training.succeed(store, model.id, trained, uri)

    reward_models.score_again(store, "ana", model.id)
    [run] = run_sensor_requests(instance, definitions(), "score_again_requests")
    assert run.status == dg.DagsterRunStatus.SUCCESS
    again = {s.trace_id: s.raw for t in stored for s in store.scores_for(t.id)}
    for score in trained.scores:
        assert again[score.trace_id] == pytest.approx(score.raw, abs=1e-5)
    # The test can fail: the personal rendering (no system turn, no evaluation context) differs.
    personal = RewardModel(job_dir / ARCHIVE_NAME, audience="personal").score_traces(stored[:1])
    assert abs(personal[0] - again[stored[0].id]) > 1e-4
    assert store.get_reward_model(model.id).status == "succeeded"


def _trace_pairs(traces):
    from stash_pipeline.core.pairs import Pair, PairSide, pair_id

    return [Pair(pair_id("trace_rating", f"r{i}", a.id, b.id), "trace", PairSide(a), PairSide(b),
                 "trace_rating", f"r{i}", tuple(sorted({a.id, b.id})))
            for i, (a, b) in enumerate(zip(traces, traces[1:]))]


@pytest.mark.slow
def test_the_scoring_after_training_is_one_chunk_and_the_rest_is_queued(
        store, instance, pipeline_base_model, monkeypatch: pytest.MonkeyPatch):
    """Issue 54: the training job scores one chunk of the owner's traces (the request's first),
    and the model succeeds with them; the rest wait in the scoring queue and are scored by
    background chunks of that size, like any other scoring."""
    monkeypatch.setenv("STASH_SCORING_BATCH", "3")
    records = agentprocessbench_records(8)
    store.import_traces(records)
    selected = [r.trace.id for r in records[:6]]
    model_id = request(store, selected, str(pipeline_base_model))
    defs = definitions()
    assert [run.status for run in run_sensor_requests(instance, defs, "queued_reward_models")] \
        == [dg.DagsterRunStatus.SUCCESS]
    assert store.get_reward_model(model_id).status == "succeeded"

    def scored() -> set[str]:
        return {r.trace.id for r in records
                if any(s.evaluator == model_id for s in store.scores_for(r.trace.id))}

    assert scored() == set(selected[:3])  # one chunk: the request's own traces first
    queued = {w.trace_id for w in store.scoring_work(personal=True, limit=100)}
    assert queued == {r.trace.id for r in records} - set(selected[:3])
    chunks = run_sensor_requests(instance, defs, "pending_scoring")
    assert [len(run.run_config["ops"]["trace_scores"]["config"]["trace_ids"])
            for run in chunks] == [3, 2]
    assert scored() == {r.trace.id for r in records}
    assert store.scoring_work(personal=True, limit=100) == []
