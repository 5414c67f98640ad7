"""The shared evaluator's benchmark step on its own, as a re-execution from failure or a step
launcher runs it: another run, in a new scratch directory, after the candidate's training step
succeeded. The candidate's checkpoint and training metrics reach it through the object store."""

from __future__ import annotations

import dagster as dg
import pytest

from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.objects.keys import result_key, shared_evaluator_checkpoint_key
from stash_pipeline_tests.support.shared_samples import contributions

TRAINING_STEPS = [dg.AssetKey(name) for name in
                  ("shared_training_pairs", "shared_split", "shared_candidate")]


@pytest.mark.slow
def test_benchmark_results_alone_in_a_fresh_scratch_gives_the_gate_its_inputs(
        store, instance, pipeline_base_model, home, monkeypatch):
    used: set[str] = set()
    store.import_traces(contributions("retail", 12, used=used)
                        + contributions("retail", 6, benchmark=True, start=100, used=used))
    job = definitions().resolve_job_def("shared_evaluator_training")
    config = {"ops": {"shared_candidate": {"config": {"base_model": str(pipeline_base_model),
                                                      "epochs": 3}}}}
    trained = job.execute_in_process(instance=instance, run_config=config,
                                     asset_selection=TRAINING_STEPS)
    assert trained.success
    candidate = trained.asset_materializations_for_node("shared_candidate")[0].metadata[
        "candidate"].value
    train_dir = home / "jobs" / "shared-evaluator" / candidate / "train"
    assert [p.name for p in train_dir.iterdir()] == ["worker.log"]  # nothing left to read there

    fresh = home / "fresh-scratch"
    monkeypatch.setenv("RM_ARTIFACT_DIR", str(fresh))
    benchmarked = job.execute_in_process(instance=instance,
                                         asset_selection=[dg.AssetKey("benchmark_results")])
    assert benchmarked.success
    [comparison] = store.list_benchmark_comparisons(candidate)
    report = comparison.report
    assert report["overall"]["pairs"] == 6
    # The gate read the candidate's training metrics: it scores actions, as its metrics say.
    shown = trained.asset_materializations_for_node("shared_candidate")[0].metadata
    assert report["candidate_metrics"]["train_pairs"] == shown["train_pairs"].value > 0
    assert report["candidate_metrics"]["action_scoring_version"] == 1
    assert not (fresh / "shared-evaluator" / candidate / "train").exists()
    # What it read stays beside the checkpoint, under keys computed from the candidate.
    checkpoint = shared_evaluator_checkpoint_key(candidate)
    objects = home / "stash" / "objects"
    assert (objects / checkpoint).is_file()
    assert (objects / result_key(checkpoint, "metrics.json")).is_file()
