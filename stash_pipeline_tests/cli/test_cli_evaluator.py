"""`stash-pipeline evaluator ...` and the trace list's scoring columns, on the CLI's own
instance."""

from __future__ import annotations

import pytest

from stash_pipeline.cli import main
from stash_pipeline.store import Store
from stash_pipeline_tests.support.cli_helpers import last_json
from stash_pipeline_tests.support.shared_samples import contributions


@pytest.fixture
def store(tmp_path, monkeypatch, use_stash_home) -> Store:
    use_stash_home(tmp_path / "stash")
    monkeypatch.setenv("RM_ARTIFACT_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("STASH_EXTRACTION", "off")
    for name in ("DATABASE_URL", "DAGSTER_HOME", "S3_BUCKET", "RM_COMPUTE"):
        monkeypatch.delenv(name, raising=False)
    store = Store.from_env()
    store.migrate()
    yield store
    store.dispose()


def test_before_any_release_traces_wait(store, capsys):
    store.import_traces(contributions("retail", 2))
    assert main(["evaluator", "releases", "--json"]) == 0
    assert last_json(capsys) == {"releases": [], "current": None}
    assert main(["evaluator", "score-pending", "--wait", "--json"]) == 0
    assert last_json(capsys) == {"release": None, "waiting": 2, "pending": 0, "scored": 0,
                                 "failed_runs": 0}
    assert main(["traces", "list", "--all-accounts"]) == 0  # contributions of several accounts
    out = capsys.readouterr().out
    # The default table's short headings: STATE is the shared evaluator's scoring state, SCORED
    # its actions scored (traces list --wide prints the full names).
    assert "STATE" in out and "SCORED" in out and "waiting" in out
    assert main(["traces", "list", "--all-accounts", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "SCORING_STATE" in out and "ACTIONS_SCORED" in out


def test_train_without_wait_queues_a_request(store, capsys):
    assert main(["evaluator", "train", "--base-model", "/models/x", "--json"]) == 0
    assert last_json(capsys)["status"] == "queued"
    [request] = store.shared_training_requests()
    assert (request.base_model, request.epochs) == ("/models/x", None)


def test_a_candidate_without_data_fails_with_the_reason(store, capsys):
    assert main(["evaluator", "train", "--base-model", "/nonexistent", "--wait", "--json"]) == 1
    outcome = last_json(capsys)
    assert (outcome["released"], outcome["version"], outcome["benchmark"]) == (False, None, None)
    assert outcome["status"] == "FAILURE" and "at least 2 usable pairs" in outcome["error"]


@pytest.mark.slow
def test_train_release_and_score_from_the_command_line(store, capsys, pipeline_base_model):
    used: set[str] = set()
    store.import_traces(contributions("retail", 12, used=used)
                        + contributions("retail", 6, benchmark=True, start=100, used=used))
    assert main(["evaluator", "train", "--base-model", str(pipeline_base_model), "--epochs", "3",
                 "--wait", "--json"]) == 0
    outcome = last_json(capsys)
    assert outcome["released"] and outcome["version"] == outcome["candidate"]
    assert outcome["incumbent"] is None and outcome["reasons"] == []
    assert outcome["benchmark"]["overall"]["pairs"] == 6
    assert {row["value"] for row in outcome["benchmark"]["slices"]} == {"retail", "helper"}

    assert main(["evaluator", "releases", "--json"]) == 0
    releases = last_json(capsys)
    assert releases["current"] == outcome["version"]
    assert releases["releases"][0]["training_traces"] == 12

    assert main(["evaluator", "score-pending", "--json"]) == 0
    assert last_json(capsys)["pending"] == 18
    assert main(["evaluator", "score-pending", "--wait", "--json"]) == 0
    assert last_json(capsys) == {"release": outcome["version"], "waiting": 0, "pending": 0,
                                 "scored": 18, "failed_runs": 0}
    assert main(["traces", "list", "--all-accounts", "--json"]) == 0
    rows = last_json(capsys)["traces"]
    assert len(rows) == 18
    assert {(r["scoring_state"], r["actions_scored"]) for r in rows} == {("scored", 2)}
    assert all(-1 <= r["mean_action_credit"] <= 1 for r in rows)


def test_the_gate_summary_says_no_incumbent_once(capsys):
    from stash_pipeline.cli.evaluator import print_outcome

    overall = {"pairs": 19, "candidate": 1.0, "incumbent": None, "decision": "above chance"}
    outcome = {"released": True, "version": "v1", "incumbent": None, "reasons": [],
               "benchmark": {"overall": overall, "slices": []}}
    print_outcome(outcome)
    assert capsys.readouterr().out.splitlines() == [
        "Released shared evaluator v1.", "benchmark: 19 pairs, candidate 1.000, no incumbent "
        "(above chance)"]
    print_outcome({**outcome, "incumbent": "v0", "benchmark": {
        "overall": {**overall, "incumbent": 0.75}, "slices": []}})
    assert "candidate 1.000, incumbent v0 0.750 (above chance)" in capsys.readouterr().out
