"""`stash-pipeline rm ...` end to end on the embedded default: SQLite, local objects, local
Dagster."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dagster as dg
import pytest

from stash_pipeline.cli import main
from stash_pipeline_tests.support.cli_helpers import home, last_json  # noqa: F401 - the fixture


def test_an_import_materialises_the_traces_asset(home, capsys):
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        [event] = instance.fetch_materializations(dg.AssetKey("traces"), limit=5).records
    metadata = event.asset_materialization.metadata
    assert metadata["traces"].value == 6
    assert "agentprocessbench" in metadata["by_format"].value


@pytest.mark.slow
def test_create_wait_show_weights_and_score_again(home, pipeline_base_model, capsys,
                                                  monkeypatch):
    code = main(["rm", "create", "--name", "hotpot", "--all-traces", "--base-model",
                 str(pipeline_base_model), "--wait", "--json"])
    out, err = capsys.readouterr()
    model = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and model["status"] == "succeeded", model["error"]
    # What a person waiting sees: the run, then a line for each long phase of the worker (not
    # Dagster's event stream).
    running, *phases = err.splitlines()
    assert running == f"running personal_reward_model_training for hotpot--{model['id']}"
    assert [re.sub(r"[\d.]+", "N", line) for line in phases] == [
        "  training: N/N steps, loss N in N s", "  evaluation: N/N pairs in N s",
        "  scoring: N/N traces, N/N actions in N s"], err
    assert model["metrics"]["train_pairs"] > 0 and model["error"] is None

    assert main(["rm", "show", model["id"], "--json"]) == 0
    assert last_json(capsys)["status"] == "succeeded"
    assert main(["rm", "show", model["id"]]) == 0
    shown = capsys.readouterr().out
    assert "  eval_accuracy " in shown and "None" not in shown  # words, not Python's
    assert main(["rm", "list", "--json"]) == 0
    assert [m["id"] for m in last_json(capsys)["reward_models"]] == [model["id"]]

    assert main(["rm", "weights", model["id"], "--json"]) == 0
    url = last_json(capsys)["url"]
    assert url.startswith("file://") and Path(url.removeprefix("file://")).is_file()

    # Score again in bounded chunks: the request's run scores the first two of the six traces,
    # the scoring queue's chunks the rest, and --wait returns once every one is scored.
    monkeypatch.setenv("STASH_SCORING_BATCH", "2")
    assert main(["rm", "score", model["id"], "--wait", "--json"]) == 0
    out, err = capsys.readouterr()
    again = json.loads(out.strip().splitlines()[-1])
    assert again["status"] == "succeeded"
    assert (again["score_again"]["status"], again["score_again"]["queued_traces"]) == \
        ("succeeded", 0)
    assert f"4 of your traces still queued for {model['id']}: scoring them in bounded chunks" \
        in err
    monkeypatch.delenv("STASH_SCORING_BATCH")

    # Score again for chosen traces with this model, actions too (issue 18).
    assert main(["traces", "list", "--json"]) == 0
    rows = last_json(capsys)["traces"]
    assert {(r["personal_model_id"], r["personal_state"]) for r in rows} == {
        (model["id"], "scored")}
    chosen = rows[0]["id"]
    assert main(["traces", "score", chosen, "--model", model["id"], "--actions", "--wait",
                 "--json"]) == 0
    request = last_json(capsys)
    assert (request["evaluator"], request["trace_ids"], request["actions"]) == \
        (model["id"], [chosen], True)
    assert main(["traces", "score", chosen, "--json"]) == 2  # no release yet
    assert "no shared evaluator release" in capsys.readouterr().err


def test_show_of_a_running_model_prints_the_workers_latest_progress(home, capsys):
    import time

    from stash_pipeline.dagster_runs.instance import get_instance
    from stash_pipeline.services import reward_models
    from stash_pipeline.store import Store

    store = Store.from_env()
    model = reward_models.create(store, "local", {"name": "m",
                                                  "trace_ids": store.trace_ids()[:2]})
    store.mark_running(model.id, "run-1")
    instance = get_instance()
    for message in ("step 3/9 loss 0.6931 pairs/s 2.00", "not progress",
                    "scoring: 40/200 traces, 500/2544 actions, 50.0 actions/s, "
                    "about 41 s left", "scored nothing yet"):
        instance.store_event(dg.EventLogEntry(
            error_info=None, level=20, user_message=message, run_id="run-1",
            timestamp=time.time(), dagster_event=None))
    assert main(["rm", "show", model.id]) == 0
    out = capsys.readouterr().out
    assert "progress: scoring: 40/200 traces, 500/2544 actions" in out
    assert main(["rm", "show", model.id, "--json"]) == 0
    assert last_json(capsys)["progress"].startswith("scoring: 40/200")


def test_refusals_name_the_field_and_exit_non_zero(home, capsys):
    assert main(["rm", "create", "--name", "x", "--trace-ids", "nope", "--json"]) == 2
    assert "trace_ids[0]" in capsys.readouterr().err
    assert main(["rm", "create", "--name", "x", "--all-traces", "--epochs", "0"]) == 2
    assert "'epochs'" in capsys.readouterr().err
    assert main(["rm", "show", "missing"]) == 2
    assert "no reward model missing" in capsys.readouterr().err
