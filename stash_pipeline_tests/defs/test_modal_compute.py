"""RM_COMPUTE=modal, with the Modal function's own body run here (`.local()`), S3 on loopback.

Only Modal's transport is replaced: the pipeline looks the function up by name and calls
`.remote(...)`, which here runs the body of deploy/modal_app.py in this process, with the
environment the function would get from its secrets. The body's worker runs in this process too,
with the environment it hands the worker (in_process_compute.py says why; a real worker process
is test_end_to_end_postgres_s3's).
"""

from __future__ import annotations

import importlib.util
import tarfile
import urllib.request
from pathlib import Path

import dagster as dg
import pytest

from stash_pipeline.compute import remote as remote_job
from stash_pipeline.compute.outcome import WorkerExit
from stash_pipeline.compute.remote import worker_environment
from stash_pipeline.dagster_runs.in_process import run_sensor_requests
from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.services import reward_models
from stash_pipeline_tests.support.in_process_compute import run_worker_in_process
from stash_pipeline_tests.support.object_helpers import s3_environ
from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records

MODAL_APP = Path(__file__).resolve().parents[2] / "deploy" / "modal_app.py"


@pytest.fixture(scope="module")
def modal_app():
    spec = importlib.util.spec_from_file_location("stash_modal_app", MODAL_APP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LocalFunction:
    """What `modal.Function.from_name(...)` gives, with `.remote` running the body here."""

    def __init__(self, function):
        self.function, self.calls = function, []

    def remote(self, **kwargs):
        self.calls.append(kwargs)
        return self.function.local(**kwargs)


@pytest.fixture
def modal_compute(home, s3_settings, monkeypatch, modal_app):
    for name, value in s3_environ(s3_settings).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RM_COMPUTE", "modal")
    monkeypatch.setattr(remote_job, "run_worker_process",
                        lambda job_dir, env: WorkerExit(run_worker_in_process(job_dir, env)))
    remote = LocalFunction(modal_app.run_reward_job)
    looked_up = []
    monkeypatch.setattr("modal.Function.from_name",
                        lambda app, name: looked_up.append((app, name)) or remote)
    return remote, looked_up


@pytest.mark.slow
def test_the_job_runs_in_the_modal_function_and_uploads_to_s3(store, instance, pipeline_base_model,
                                                               modal_compute, s3_settings):
    remote, looked_up = modal_compute
    records = agentprocessbench_records(5)
    store.import_traces(records)
    model = reward_models.create(store, "ana", {"name": "m", "base_model": str(pipeline_base_model),
                                                "trace_ids": [r.trace.id for r in records]})
    runs = run_sensor_requests(instance, definitions(), "queued_reward_models")
    assert runs[0].status == dg.DagsterRunStatus.SUCCESS
    done = store.get_reward_model(model.id)
    assert done.status == "succeeded", done.error
    assert looked_up == [("stash-reward-worker", "run_reward_job")]
    # The function got object-store URIs of the inputs and uploaded the checkpoint itself.
    [call] = remote.calls
    assert set(call["inputs"]) >= {"settings.json", "train_pairs.jsonl", "score_traces.jsonl"}
    assert all(uri.startswith(f"s3://{s3_settings.bucket}/") for uri in call["inputs"].values())
    assert done.checkpoint_uri == f"s3://{s3_settings.bucket}/reward-models/{model.id}/attempt-1/reward-model.tar.gz"
    assert len([s for r in records for s in store.scores_for(r.trace.id)]) == len(records)
    # The worker's progress came back through Pipes messages in S3, as run log events.
    logs = [e.message for e in instance.all_logs(runs[0].run_id) if e.message]
    assert any(message.startswith("step 1/") for message in logs)
    # The owner downloads the archive through a presigned URL.
    url = reward_models.weights_url(store, _s3_objects(), "ana", model.id)
    with urllib.request.urlopen(url) as response, tarfile.open(fileobj=response,
                                                               mode="r|gz") as tar:
        assert "reward-model/model.safetensors" in tar.getnames()


def _s3_objects():
    from stash_pipeline.objects import object_store_from_env

    return object_store_from_env()


def test_no_database_or_queue_credential_reaches_the_gpu_process(modal_app):
    environ = {"DATABASE_URL": "postgresql://u:p@db/stash", "REDIS_URL": "redis://q",
               "DAGSTER_PG_PASSWORD": "p", "MODAL_TOKEN_SECRET": "m", "S3_BUCKET": "b",
               "S3_SECRET_KEY": "s", "ANTHROPIC_API_KEY": "a", "PATH": "/usr/bin"}
    assert worker_environment(environ) == {"S3_BUCKET": "b", "S3_SECRET_KEY": "s",
                                           "ANTHROPIC_API_KEY": "a", "PATH": "/usr/bin"}
    # The function declares only the storage and model-provider secrets, an A10G and 20 minutes.
    assert modal_app.SECRETS == ("stash-storage", "stash-model-provider")
    assert (modal_app.GPU, modal_app.TIMEOUT_S) == ("A10G", 1200)


def test_modal_compute_without_s3_is_a_clear_failure(store, instance, home, monkeypatch,
                                                     modal_app):
    monkeypatch.setenv("RM_COMPUTE", "modal")
    monkeypatch.setattr("modal.Function.from_name",
                        lambda app, name: LocalFunction(modal_app.run_reward_job))
    records = agentprocessbench_records(3)
    store.import_traces(records)
    model = reward_models.create(store, "ana", {"name": "m", "base_model": "/nowhere",
                                                "trace_ids": [r.trace.id for r in records]})
    run_sensor_requests(instance, definitions(), "queued_reward_models")
    failed = store.get_reward_model(model.id)
    assert failed.status == "failed" and "S3_BUCKET" in failed.error


@pytest.mark.slow
def test_the_shared_evaluator_scores_pending_traces_through_the_modal_function(
        store, instance, modal_compute, shared_checkpoint, s3_settings):
    from stash_pipeline.objects.keys import shared_evaluator_checkpoint_key
    from stash_pipeline.store import Release

    remote, _ = modal_compute
    uri = _s3_objects().put_file(shared_evaluator_checkpoint_key("r1"), shared_checkpoint)
    store.save_release(Release("r1", uri, {}, {"training_traces": {}, "benchmark_traces": {}}))
    records = agentprocessbench_records(2)
    store.import_traces(records)
    [run] = run_sensor_requests(instance, definitions(), "pending_scoring")
    assert run.status == dg.DagsterRunStatus.SUCCESS
    [call] = remote.calls
    assert call["checkpoint_uri"] == uri and call["upload_key"] is None
    assert store.traces_pending_scoring("r1") == []
    for record in records:
        assert len(store.action_scores_for(record.trace.id, "r1")) == len(record.trace.actions())


def test_benchmark_rewards_come_back_from_the_modal_function_as_files(tmp_path):
    from stash_pipeline.compute.contract import PAIR_REWARDS, read_jsonl
    from stash_pipeline.compute.modal import write_results

    rows = [{"pair_id": "p1", "chosen": 0.5, "rejected": -0.25}]
    write_results(tmp_path, {"exit_code": 0, "metrics": {"scored_pairs": 1}, "scores": [],
                             "action_scores": None, "pair_rewards": rows, "log_tail": "done"})
    assert read_jsonl(tmp_path / PAIR_REWARDS) == rows


def test_the_functions_worker_is_a_process_with_exactly_its_environment(tmp_path):
    """What the in-process worker above stands in for: RM_WORKER_PYTHON run as
    ``-m stash_pipeline.worker <job>`` in the job directory, with the environment handed to it and
    nothing else, its exit status returned."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n{ pwd; echo \"$@\"; env; } > seen.txt\nexit 3\n")
    python.chmod(0o755)
    code = remote_job.run_worker_process(job_dir, {"RM_WORKER_PYTHON": str(python),
                                                   "S3_BUCKET": "b", "PATH": "/usr/bin:/bin"}).code
    cwd, argv, *environment = (job_dir / "seen.txt").read_text().splitlines()
    assert code == 3 and cwd == str(job_dir)
    assert argv == f"-m stash_pipeline.worker {job_dir}"
    assert {line.split("=", 1)[0] for line in environment} <= {
        "RM_WORKER_PYTHON", "S3_BUCKET", "PATH", "PWD", "SHLVL", "_"}  # the shell's own three
    assert "S3_BUCKET=b" in environment


@pytest.mark.slow
def test_a_chunk_s_budget_holds_through_the_modal_function(
        store, instance, modal_compute, shared_checkpoint, s3_settings, monkeypatch):
    """Issue 54: the list of finished traces comes back from the function with the scores, so a
    chunk that stopped at its budget stores only those and leaves the rest queued."""
    from stash_pipeline.defs.scoring import sensors
    from stash_pipeline.objects.keys import shared_evaluator_checkpoint_key
    from stash_pipeline.store import Release
    from stash_pipeline.worker.scoring import FIRST_GROUP

    uri = _s3_objects().put_file(shared_evaluator_checkpoint_key("r1"), shared_checkpoint)
    store.save_release(Release("r1", uri, {}, {"training_traces": {}, "benchmark_traces": {}}))
    records = agentprocessbench_records(6)
    store.import_traces(records)
    monkeypatch.setattr(sensors, "chunk_seconds", lambda: 1e-6)
    [run] = run_sensor_requests(instance, definitions(), "pending_scoring")
    assert run.status == dg.DagsterRunStatus.SUCCESS
    ids = run.run_config["ops"]["trace_scores"]["config"]["trace_ids"]
    assert sorted(store.traces_pending_scoring("r1")) == sorted((t, 1) for t in ids[FIRST_GROUP:])
    for trace_id in ids[:FIRST_GROUP]:
        assert store.scored_version(trace_id, "r1") == 1
