"""The shared evaluator's chain on a test instance, over three candidates in a row:

1. a first release, from learnable synthetic contributions;
2. a candidate that beats it overall but regresses on a populated slice: blocked by the gate;
3. a candidate that loses on a slice too small to judge (noise): released, and every trace is
   scored again by the new release.

Contributors change their minds between candidates by opting traces out and others in, so the
scenario also shows opting out taking a trace's data out of the next candidate.
"""

from __future__ import annotations

import dagster as dg
import pytest

from stash_pipeline.dagster_runs.in_process import run_sensor_requests
from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.defs.shared.sensors import request_run_key
from stash_pipeline.store import Store
from stash_pipeline_tests.support.in_process_compute import with_in_process_compute
from stash_pipeline_tests.support.shared_samples import contributions

pytestmark = pytest.mark.slow
EPOCHS = 3


def train(store: Store, instance: dg.DagsterInstance, defs: dg.Definitions,
          base_model) -> dg.DagsterRun:
    """`evaluator train --wait`: a request, and the sensor's run of the chain executed here."""
    request = store.request_shared_training(base_model=str(base_model), epochs=EPOCHS)
    [run] = run_sensor_requests(instance, defs, "shared_training_requests",
                                run_keys=[request_run_key(request.id)])
    return run


def score_everything(instance: dg.DagsterInstance, defs: dg.Definitions) -> list[dg.DagsterRun]:
    return run_sensor_requests(instance, defs, "pending_scoring")


def opt(store: Store, records, flag: bool) -> None:
    for record in records:
        store.set_contribute(record.trace.id, flag, owner=record.trace.owner)


def check_result(instance: dg.DagsterInstance, run: dg.DagsterRun) -> dg.AssetCheckEvaluation:
    [evaluation] = [event.dagster_event.event_specific_data
                    for event in instance.all_logs(run.run_id)
                    if event.dagster_event and event.dagster_event.event_type
                    == dg.DagsterEventType.ASSET_CHECK_EVALUATION]
    return evaluation


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, pipeline_base_model):
    home = tmp_path_factory.mktemp("shared-home")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STASH_HOME", str(home / "stash"))
        env.setenv("DATABASE_URL", f"sqlite:///{home / 'stash.db'}")
        env.setenv("RM_ARTIFACT_DIR", str(home / "jobs"))
        env.setenv("STASH_EXTRACTION", "off")
        env.setenv("STASH_SCORING_BATCH", "500")
        for name in ("S3_BUCKET", "S3_ENDPOINT", "RM_COMPUTE", "DAGSTER_HOME"):
            env.delenv(name, raising=False)
        store = Store(f"sqlite:///{home / 'stash.db'}")
        store.migrate()
        used: set[str] = set()
        group = {  # contributors' training data, right (+) or reversed (-), and the benchmark
            "airline-": contributions("airline", 15, reversed_=True, used=used),
            "retail+": contributions("retail", 15, used=used),
            "weather+": contributions("weather", 5, used=used),
            "bench-retail": contributions("retail", 16, benchmark=True, start=100, used=used),
            "bench-weather": contributions("weather", 3, benchmark=True, start=100, used=used),
        }
        for records in group.values():
            store.import_traces(records)
        results: dict = {"group": group, "store": store}
        with dg.instance_for_test() as instance:
            # The module's fixture is set up before the per-test swap of the compute resource
            # (conftest's _definitions_loaded_once), so it swaps it itself.
            defs = with_in_process_compute(definitions())
            results["waiting"] = {s.scoring_state for s in store.list_traces()}
            results["first"] = train(store, instance, defs, pipeline_base_model)
            results["first_check"] = check_result(instance, results["first"])
            results["first_release"] = store.latest_release()
            results["first_scoring"] = score_everything(instance, defs)
            results["first_listing"] = store.list_traces()

            # The airline benchmark arrives; contributors correct airline and spoil retail.
            group["bench-airline"] = contributions("airline", 20, benchmark=True, start=100,
                                                   used=used)
            group["airline+"] = contributions("airline", 15, start=200, used=used)
            group["retail-"] = contributions("retail", 15, reversed_=True, start=200, used=used)
            for name in ("bench-airline", "airline+", "retail-"):
                store.import_traces(group[name])
            opt(store, group["airline-"] + group["retail+"], False)
            results["blocked"] = train(store, instance, defs, pipeline_base_model)
            results["blocked_check"] = check_result(instance, results["blocked"])

            # Retail is right again; the weather contributors reverse, on a slice of 3 pairs.
            group["weather-"] = contributions("weather", 5, reversed_=True, start=200, used=used)
            store.import_traces(group["weather-"])
            opt(store, group["retail-"] + group["weather+"], False)
            opt(store, group["retail+"], True)
            results["passed"] = train(store, instance, defs, pipeline_base_model)
            results["passed_check"] = check_result(instance, results["passed"])
            results["second_release"] = store.latest_release()
            results["pending_after_release"] = len(store.traces_pending_scoring(
                results["second_release"].version))
            results["second_scoring"] = score_everything(instance, defs)
            results["materializations"] = {
                key: instance.fetch_materializations(dg.AssetKey(key), limit=10).records
                for key in ("shared_training_pairs", "shared_split", "shared_candidate",
                            "benchmark_results", "shared_evaluator_release",
                            "trace_scores")}
            jobs = home / "jobs"
            results["scratch"] = sorted(str(p.relative_to(jobs)) for p in jobs.rglob("*")
                                        if p.is_file())
            yield results
        store.dispose()


def comparisons(scenario) -> list:
    return scenario["store"].list_benchmark_comparisons()


def test_finished_candidates_leave_only_their_logs_and_scoring_no_scratch(scenario):
    """Each candidate's training and benchmark job directories keep worker.log alone; the
    auto-scoring runs' directories are gone."""
    candidates = [c.candidate for c in comparisons(scenario)]
    incumbents = {c.candidate: c.incumbent for c in comparisons(scenario)}
    expected = sorted(
        f"shared-evaluator/{candidate}/{job}/worker.log" for candidate in candidates
        for job in ("train", f"benchmark-{candidate}",
                    *([f"benchmark-{incumbents[candidate]}"] if incumbents[candidate] else [])))
    assert len(candidates) == 3 and scenario["scratch"] == expected


def test_traces_wait_for_the_first_release(scenario):
    assert scenario["waiting"] == {"waiting"}


def test_a_first_release_from_learnable_contributions(scenario):
    run, release = scenario["first"], scenario["first_release"]
    assert run.status == dg.DagsterRunStatus.SUCCESS
    assert scenario["first_check"].passed
    report = release.benchmark_report
    assert report["first_release"] and report["passed"] and report["reviewed_training_pairs"] > 0
    assert report["overall"]["pairs"] == 19 and report["overall"]["decision"] == "above chance"
    assert report["overall"]["candidate_low"] > 0.5
    assert release.checkpoint_uri.endswith(
        f"shared-evaluator/{release.version}/reward-model.tar.gz")
    trained = set(release.data_snapshot["training_traces"])
    group = scenario["group"]
    assert trained == {r.trace.id for name in ("airline-", "retail+", "weather+")
                       for r in group[name]}
    assert set(release.data_snapshot["benchmark_traces"]).isdisjoint(trained)


def test_the_first_release_scores_every_action_of_every_trace(scenario):
    store, version = scenario["store"], scenario["first_release"].version
    assert scenario["first_scoring"] and all(
        run.status == dg.DagsterRunStatus.SUCCESS for run in scenario["first_scoring"])
    listing = scenario["first_listing"]
    assert {row.scoring_state for row in listing} == {"scored"}
    assert all(row.actions_scored == row.actions == 2 for row in listing)
    assert all(-1 <= row.mean_action_credit <= 1 for row in listing)
    sample = scenario["group"]["retail+"][0].trace.id
    assert {s.evaluator for s in store.action_scores_for(sample, version)} == {version}
    assert store.scores_for(sample) == []  # action credit only: no whole-trace shared score


def test_a_candidate_that_regresses_on_a_populated_slice_is_blocked(scenario):
    run, check = scenario["blocked"], scenario["blocked_check"]
    first, second = scenario["first_release"], scenario["second_release"]
    assert run.status == dg.DagsterRunStatus.FAILURE and not check.passed
    blocked = comparisons(scenario)[1]
    assert blocked.incumbent == first.version and not blocked.passed
    report = blocked.report
    assert report["overall"]["candidate"] > report["overall"]["incumbent"]  # it wins overall
    retail = next(r for r in report["slices"] if r["value"] == "retail")
    assert retail["populated"] and retail["decision"] == "regression"
    assert any("regression on domain 'retail'" in reason for reason in report["reasons"])
    # It was never released: the next release's incumbent is still the first one.
    assert blocked.candidate not in {r.version for r in scenario["store"].list_releases()}
    assert second.benchmark_report["incumbent"] == first.version


def test_opting_out_takes_a_traces_data_out_of_the_next_candidate(scenario):
    store, group = scenario["store"], scenario["group"]
    blocked = comparisons(scenario)[1].candidate
    sources = {t for p in store.load_pairs(candidate=blocked) for t in p.source_trace_ids}
    assert sources == {r.trace.id for name in ("airline+", "retail-", "weather+")
                       for r in group[name]}


def test_a_small_slice_that_loses_is_noise_and_the_candidate_is_released(scenario):
    run, check, release = scenario["passed"], scenario["passed_check"], scenario["second_release"]
    assert run.status == dg.DagsterRunStatus.SUCCESS and check.passed
    report = release.benchmark_report
    assert release.version == comparisons(scenario)[2].candidate and report["passed"]
    weather = next(r for r in report["slices"] if r["value"] == "weather")
    assert weather["pairs"] == 3 and not weather["populated"]
    assert weather["candidate"] < weather["incumbent"]
    assert weather["decision"] == "too small to judge"
    assert report["overall"]["candidate"] > report["overall"]["incumbent"]


def test_a_new_release_rescores_every_trace(scenario):
    store, version = scenario["store"], scenario["second_release"].version
    assert scenario["pending_after_release"] == len(store.trace_ids())
    assert all(run.status == dg.DagsterRunStatus.SUCCESS for run in scenario["second_scoring"])
    assert store.traces_pending_scoring(version) == []
    listing = store.list_traces()
    assert {row.scoring_state for row in listing} == {"scored"}
    assert sum(row.actions_scored for row in listing) == 2 * len(listing)


def test_the_chain_shows_in_the_ui_with_its_reports(scenario):
    records = scenario["materializations"]
    assert len(records["shared_training_pairs"]) == 3 and len(records["benchmark_results"]) == 3
    assert len(records["shared_evaluator_release"]) == 2  # the blocked candidate was not
    benchmark = records["benchmark_results"][0].asset_materialization.metadata
    assert {"decision", "overall", "slices", "passed"} <= set(benchmark)
    assert "| slice | value | pairs |" in benchmark["slices"].value
    pairs = records["shared_training_pairs"][0].asset_materialization.metadata
    assert pairs["traces_in_both"].value == 0
    # How far to trust the release before it scores anything: its benchmark, with intervals.
    released = records["shared_evaluator_release"][0].asset_materialization.metadata
    assert {"trust", "trust_figures", "heldout_accuracy", "heldout_accuracy_n"} <= set(released)
    assert released["heldout_accuracy"].value == \
        benchmark["candidate_accuracy"].value
    assert "separate benchmark" in released["trust"].value
    assert records["trace_scores"]

