"""Dagster's re-execute from failure on a personal model's run: the step it begins at resumes the
model, and a failed storing step keeps its attempt's files for it."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.pipelines import personal_training
from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records, request

pytestmark = pytest.mark.slow
JOB = "personal_reward_model_training"


def personal_job() -> dg.JobDefinition:
    """The job as the re-execution loads it again (``dg.reconstructable``)."""
    return definitions().resolve_job_def(JOB)


def objects_of(home: Path, model_id: str) -> list[str]:
    root = home / "stash" / "objects"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and model_id in str(p))


def fails_once(monkeypatch: pytest.MonkeyPatch, step: str, error: Exception) -> None:
    """``personal_training.<step>`` raises ``error`` on its first call only."""
    original, calls = getattr(personal_training, step), []

    def first_call_fails(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise error
        return original(*args, **kwargs)

    monkeypatch.setattr(personal_training, step, first_call_fails)


def queued_model(store, instance, pipeline_base_model) -> str:
    records = agentprocessbench_records(6)
    store.import_traces(records)
    model_id = request(store, [r.trace.id for r in records], str(pipeline_base_model))
    instance.add_dynamic_partitions("personal_reward_model", [model_id])
    return model_id


def failed_run(instance: dg.DagsterInstance, model_id: str) -> dg.DagsterRun:
    result = personal_job().execute_in_process(instance=instance, partition_key=model_id,
                                               raise_on_error=False)
    assert not result.success
    return result.dagster_run


def re_executed_from_failure(instance: dg.DagsterInstance, run: dg.DagsterRun,
                             model_id: str) -> dg.ExecuteJobResult:
    """What the UI's "Re-execute from failure" runs, in this process."""
    options = dg.ReexecutionOptions.from_failure(run.run_id, instance)
    return dg.execute_job(dg.reconstructable(personal_job), instance,
                          reexecution_options=options, tags={"dagster/partition": model_id},
                          run_config={"execution": {"config": {"in_process": {}}}})


@pytest.fixture
def failed_storing(store, instance, pipeline_base_model, monkeypatch) -> tuple[str, dg.DagsterRun]:
    """A model whose run trained it and then failed to store its results (the database went
    away for a moment): the model id and the failed run."""
    model_id = queued_model(store, instance, pipeline_base_model)
    fails_once(monkeypatch, "succeed", OSError("the database went away"))
    return model_id, failed_run(instance, model_id)


def step_starts(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [event.step_key for event in instance.all_logs(run_id)
            if event.dagster_event and event.dagster_event.event_type
            == dg.DagsterEventType.STEP_START]


def test_a_failed_storing_step_keeps_its_attempt_and_a_re_execution_stores_it(
        store, instance, home, failed_storing) -> None:
    model_id, failed = failed_storing
    model = store.get_reward_model(model_id)
    assert (model.status, model.attempt) == ("failed", 1)
    assert "the database went away" in model.error and model.checkpoint_uri is None
    kept = objects_of(home, model_id)
    assert "reward-model.tar.gz" in {Path(p).name for p in kept} and len(kept) > 1

    result = re_executed_from_failure(instance, failed, model_id)
    assert result.success
    assert step_starts(instance, result.run_id) == ["personal_scores"]  # nothing trained again
    model = store.get_reward_model(model_id)
    assert (model.status, model.attempt, model.run_id) == ("succeeded", 1, result.run_id)
    assert model.error is None and model.metrics["train_pairs"] > 0
    assert model.checkpoint_uri.endswith(f"{model_id}/attempt-1/reward-model.tar.gz")
    assert [s for s in store.scores_for(model.trace_ids[0]) if s.evaluator == model_id]
    # Stored: only the archive stays.
    assert [Path(p).name for p in objects_of(home, model_id)] == ["reward-model.tar.gz"]


def test_a_retry_after_a_failed_storing_step_trains_anew_and_drops_the_old_files(
        store, instance, home, failed_storing) -> None:
    """`rm retry` instead: a new attempt, and the failed attempt's kept files go."""
    model_id, _ = failed_storing
    assert any("attempt-1" in path for path in objects_of(home, model_id))  # kept so far
    store.requeue(model_id)
    result = personal_job().execute_in_process(instance=instance, partition_key=model_id)
    assert result.success
    model = store.get_reward_model(model_id)
    assert (model.status, model.attempt) == ("succeeded", 2)
    assert objects_of(home, model_id) == [
        str(Path(model.checkpoint_uri.removeprefix("file://")).relative_to(
            home / "stash" / "objects"))]


def test_a_re_execution_from_a_failed_training_step_trains_a_new_attempt(
        store, instance, pipeline_base_model, monkeypatch) -> None:
    model_id = queued_model(store, instance, pipeline_base_model)
    fails_once(monkeypatch, "write_training_job", OSError("no space left on device"))
    failed = failed_run(instance, model_id)
    assert store.get_reward_model(model_id).status == "failed"

    result = re_executed_from_failure(instance, failed, model_id)
    assert result.success
    assert step_starts(instance, result.run_id) == ["personal_checkpoint", "personal_scores"]
    model = store.get_reward_model(model_id)
    assert (model.status, model.attempt, model.run_id) == ("succeeded", 2, result.run_id)
