"""How far to trust an evaluator, over HTTP (SQLite and PostgreSQL): the model's held-out note,
the trust reports of a model and a release, their isolation, and the SQL endpoint's view."""

from __future__ import annotations

from pathlib import Path

import pytest

from stash_pipeline.core.estimates import auc
from stash_pipeline.core.trust import HANDFUL_NOTE, figures_of
from stash_pipeline_tests.support.api_helpers import Api, import_traces
from stash_pipeline_tests.support.trust_helpers import (
    COUNT,
    RELEASE,
    TRAINED,
    raw_score,
    succeeded,
    trace_id,
    trust_world,
)

RM = "/api/v1/rm/reward-models"


def overall(report: dict, metric: str) -> dict:
    return next(f for f in figures_of(report, metric) if f["slice_kind"] == "all")


def test_a_handful_of_held_out_pairs_is_said_with_the_seeds_sentence(api: Api, tmp_path: Path):
    world = trust_world(api, tmp_path)
    model = world.client.get(f"{RM}/{world.model_id}").json()
    assert model["metrics"]["eval_accuracy"] == 1.0  # the seed's field stays as it is
    held = model["held_out"]
    assert (held["pairs"], held["accuracy"], held["note"]) == (3, 1.0, HANDFUL_NOTE)
    assert held["interval"][0] < 0.5 < held["interval"][1] == 1.0
    queued = world.client.post(RM, json={"name": "q", "trace_ids": ["t07"]}).json()
    assert world.client.get(f"{RM}/{queued['id']}").json()["held_out"] is None


def test_a_models_report_on_the_traces_it_did_not_train_on(api: Api, tmp_path: Path):
    world = trust_world(api, tmp_path)
    response = world.client.get(f"{RM}/{world.model_id}/trust")
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["evaluator"] == world.model_id and report["name"] == "refunds"
    assert report["traces"]["considered"] == COUNT - len(TRAINED)
    kept = [i for i in range(COUNT) if trace_id(i) not in TRAINED]
    whole = overall(report, "outcome_auc_trace_score")
    assert whole["value"] == pytest.approx(auc([raw_score(i) for i in kept if succeeded(i)],
                                               [raw_score(i) for i in kept if not succeeded(i)]))
    assert whole["low"] < whole["value"] < whole["high"] and whole["n"] == len(kept)
    slices = {(f["slice_kind"], f["slice"]) for f in figures_of(report, "outcome_auc_trace_score")}
    assert {("tool", "refund"), ("tool", "get_order"), ("domain", "telecom"),
            ("agent", "sales")} <= slices
    assert figures_of(report, "success_rate_by_calibrated_score")
    assert overall(report, "spearman_trace_rating")["n"] > 5
    assert report["held_out"]["note"] == HANDFUL_NOTE
    assert any(n.startswith("3 held-out pairs: With a handful of pairs") for n in report["notes"])
    cut = overall(report, "truncated_traces")
    assert cut["detail"]["window"] == 512 and 0 < cut["detail"]["truncated"] < cut["n"]
    assert report["methods"]["auc"].startswith("Hanley-McNeil")


def test_a_releases_report_on_each_accounts_own_traces(api: Api, tmp_path: Path):
    world = trust_world(api, tmp_path)
    report = world.client.get("/api/v1/releases/current/trust").json()
    assert report["evaluator"] == RELEASE and report["kind"] == "shared"
    assert report["held_out"]["pairs"] == 40 and report["held_out"]["note"] is None
    assert report["traces"]["trained_on_left_out"] == 1  # t02 is in its snapshot
    credit = overall(report, "outcome_auc_mean_action_credit")
    assert credit["n"] == COUNT - 1 and credit["value"] > 0.5
    assert world.client.get(f"/api/v1/releases/{RELEASE}/trust").json()["figures"] == \
        report["figures"]
    # Another account's report of the same release counts only its own traces.
    _, other = api.account("bo")
    import_traces(other, "bo-1")
    theirs = other.get("/api/v1/releases/current/trust").json()
    assert theirs["traces"]["considered"] == 1
    assert not figures_of(theirs, "outcome_auc_mean_action_credit")


def test_reports_are_not_found_for_others_unfinished_models_and_missing_releases(
        api: Api, tmp_path: Path):
    missing = api.account("early")[1].get("/api/v1/releases/current/trust")
    assert missing.status_code == 404 and "no shared evaluator release yet" in missing.text
    world = trust_world(api, tmp_path)
    _, mallory = api.account("mallory")
    assert mallory.get(f"{RM}/{world.model_id}/trust").status_code == 404
    assert mallory.get("/api/v1/releases/nope/trust").status_code == 404
    queued = world.client.post(RM, json={"name": "q", "trace_ids": ["t07"]}).json()["id"]
    refused = world.client.get(f"{RM}/{queued}/trust")
    assert refused.status_code == 404 and "it is queued" in refused.text
    _, early = api.account("before", before_rollout=True)
    assert early.get(f"{RM}/{world.model_id}/trust").status_code == 404
    assert world.client.get(f"{RM}/nul%00/trust").status_code == 404


def test_the_sql_endpoint_shows_the_callers_trust_figures_only(api: Api, tmp_path: Path):
    world = trust_world(api, tmp_path)
    world.client.get(f"{RM}/{world.model_id}/trust")
    world.client.get("/api/v1/releases/current/trust")
    _, mallory = api.account("mallory")
    import_traces(mallory, "m-1")
    mallory.get("/api/v1/releases/current/trust")
    query = ("SELECT evaluator, kind, metric, slice_kind, slice, value, low, high, n, detail "
             "FROM trust_figures WHERE metric = 'heldout_accuracy' AND slice_kind = 'all' "
             "ORDER BY kind")
    rows = world.client.post("/api/v1/sql", json={"sql": query}).json()["rows"]
    assert [(r[0], r[1], r[8]) for r in rows] == [(world.model_id, "personal", 3),
                                                   (RELEASE, "shared", 40)]
    assert rows[0][5] == 1.0 and rows[0][6] < 0.5 and '"correct": 3' in rows[0][9]
    count = "SELECT count(*) FROM trust_figures WHERE metric = 'outcome_auc_mean_action_credit'"
    assert world.client.post("/api/v1/sql", json={"sql": count}).json()["rows"][0][0] > 5
    # mallory's own release report has no outcome figure, and none of ana's rows.
    theirs = mallory.post("/api/v1/sql", json={"sql": "SELECT DISTINCT evaluator, n FROM "
                                                      "trust_figures"}).json()["rows"]
    assert theirs == [[RELEASE, 40]]


def test_every_figure_and_baseline_is_the_same_in_the_api_and_the_sql_view(
        api: Api, tmp_path: Path):
    """The report's figures and baselines, exactly, in the API and the SQL view (the viewer's
    verdict: test_viewer)."""
    world = trust_world(api, tmp_path)
    report = world.client.get(f"{RM}/{world.model_id}/trust").json()
    metrics = {f["metric"] for f in report["figures"]}
    assert {"baseline_length_auc", "within_task_accuracy_trace_score",
            "baseline_length_within_task"} <= metrics
    rows: list = []
    while True:  # a page at a time: the endpoint caps the rows of one answer
        query = ("SELECT metric, slice_kind, slice, value, low, high, n FROM trust_figures "
                 f"WHERE evaluator = '{world.model_id}' ORDER BY metric, slice_kind, slice "
                 f"LIMIT 1000 OFFSET {len(rows)}")
        answer = world.client.post("/api/v1/sql", json={"sql": query}).json()
        rows += answer["rows"]
        if not answer["truncated"]:
            break
    assert sorted(map(tuple, rows), key=repr) == sorted(
        ((f["metric"], f["slice_kind"], f["slice"], f["value"], f["low"], f["high"], f["n"])
         for f in report["figures"]), key=repr)
    # Five tasks (task-0 .. task-4): intervals clustered over them, and no verdict drawn.
    assert report["grouping"]["groups"] == 5
    assert report["verdict"]["label"] == "too few tasks (5) to judge"
    assert report["notes"][0].startswith("Verdict: the AUC of its whole-trace score")
