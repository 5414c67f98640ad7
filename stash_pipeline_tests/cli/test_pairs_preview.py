"""`stash-pipeline pairs preview` on a real SQLite store holding real tau2-bench runs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from stash_pipeline.cli import main
from stash_pipeline.core.feedback import Comment, Rating
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.traces import Message, ToolCall, Trace
from stash_pipeline.importers import read_path
from stash_pipeline.store import Store

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
HOTPOTQA = DATA / "agentprocessbench" / "hotpotqa.jsonl"
RETAIL_RUNS = sorted((DATA / "tau2-bench" / "runs").glob("retail_*.json"))
RATED_ID = "0b9a4c57-52d4-4c55-9d7e-6f2a9f1e0a01"


def rated_trace(contribute: bool) -> ImportedTrace:
    """One opted-in trace: three rated actions (3 step pairs) and one comment (pending)."""
    trace = Trace(RATED_ID, contribute=contribute, agent="bot", domain="retail", messages=(
        Message("system", "Follow the refund policy."),
        Message("user", "Refund order 7."),
        Message("assistant", "Checking.", tool_calls=(ToolCall("c0", "get_order", {"id": 7}),)),
        Message("tool", "{\"status\": \"delivered\"}", tool_call_id="c0", name="get_order"),
        Message("assistant", "Refunded."),
    ))
    return ImportedTrace(trace, (
        Rating("r-good", RATED_ID, 1, f"{RATED_ID}/m2.call0"),
        Rating("r-ok", RATED_ID, 0, f"{RATED_ID}/m2"),
        Rating("r-bad", RATED_ID, -1, f"{RATED_ID}/m4"),
        Comment("k-1", RATED_ID, "You refunded without checking the 30-day window.",
                f"{RATED_ID}/m4"),
    ))


def sqlite_store(tmp_path, monkeypatch, records) -> Store:
    url = f"sqlite:///{tmp_path}/s.db"
    store = Store(url)
    store.migrate()
    store.import_traces(records)
    monkeypatch.setenv("DATABASE_URL", url)  # what the CLI's Store.from_env() opens
    return store


@pytest.fixture
def store(tmp_path, monkeypatch):
    assert RETAIL_RUNS, f"real data missing under {DATA}"
    records = [r for path in RETAIL_RUNS for r in read_path(path)]
    store = sqlite_store(tmp_path, monkeypatch, [*records, rated_trace(contribute=True)])
    yield store
    store.dispose()


def preview(capsys, *args: str) -> dict:
    assert main(["pairs", "preview", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_all_traces_counts_by_source_split_and_pending_extraction(store, capsys):
    report = preview(capsys, "--all-traces")
    assert report["by_source"] == {
        "step_rating": 3, "trace_rating": 0, "comment": 0, "correction": 0, "assessment": 0,
        "reviewed_comparison": 0, "verified_outcome": 12}
    assert report["traces"] == 81 and report["pairs"] == 15
    assert report["dropped_by_max_pairs"] == 0
    assert report["train_pairs"] + report["eval_pairs"] + report[
        "excluded_cross_trace_pairs"] == 15
    # Outcome pairs span two traces of one task: whole tasks (linked groups) are held out, so
    # nothing crosses and there is an evaluation.
    assert report["eval_available"] is True and report["eval_pairs"] > 0
    assert report["excluded_cross_trace_pairs"] == 0 and report["eval_unavailable_reason"] is None
    assert report["train_traces"] + report["eval_traces"] == 25
    assert report["action_pairs"] == 3 and report["tool_pairs"] == 2
    # Nothing is extracted by preview: every trace with actions is pending assessment.
    assert report["pending_extraction"]["comment"] == 1
    assert report["pending_extraction"]["traces"] == 81
    assert report["pending_extraction"]["correction"] > 0
    assert report["error"] is None


def test_max_pairs_drops_a_seeded_sample(store, capsys):
    report = preview(capsys, "--all-traces", "--max-pairs", "5")
    assert report["pairs"] == 5 and report["dropped_by_max_pairs"] == 10
    assert sum(report["by_source"].values()) == 5
    assert preview(capsys, "--all-traces", "--max-pairs", "5") == report


def test_shared_uses_only_opted_in_traces(store, capsys):
    report = preview(capsys, "--all-traces", "--shared")
    assert report["audience"] == "shared" and report["traces"] == 1
    assert report["by_source"]["step_rating"] == 3 and report["by_source"]["verified_outcome"] == 0
    # All pairs come from one trace: they all train and evaluation is unavailable.
    assert report["train_pairs"] == 3 and report["eval_pairs"] == 0
    assert report["eval_available"] is False
    assert "every pair comes from one trace" in report["eval_unavailable_reason"]
    assert (report["training_traces"], report["benchmark_traces"]) == (1, 0)
    assert report["benchmark_pairs"] == 0 and report["traces_in_both"] == 0
    # Comments never train the shared evaluator: the trace's comment is not even pending.
    assert report["pending_extraction"] == {"traces": 0, "comment": 0, "correction": 0,
                                            "assessment": 0}


def test_selected_traces_only_and_too_few_pairs_reported(store, capsys):
    report = preview(capsys, "--trace-ids", RATED_ID)
    assert report["traces"] == 1 and report["pairs"] == 3
    outcome_trace = next(i for i in store.trace_ids() if i != RATED_ID)
    report = preview(capsys, "--trace-ids", outcome_trace)
    assert report["pairs"] == 0 and "at least 2 usable pairs" in report["error"]


def test_unknown_trace_id_is_a_clear_error(store, capsys):
    assert main(["pairs", "preview", "--trace-ids", "no-such-trace"]) == 2
    assert "no-such-trace" in capsys.readouterr().err


def test_human_output(store, capsys):
    assert main(["pairs", "preview", "--all-traces"]) == 0
    out = capsys.readouterr().out
    assert "verified_outcome     12" in out and "pending extraction" in out


def test_step_labelled_traces_split_with_evaluation(tmp_path, monkeypatch, capsys):
    store = sqlite_store(tmp_path, monkeypatch, list(read_path(HOTPOTQA)))
    report = preview(capsys, "--all-traces")
    store.dispose()
    # 885 step and 130 trace pairs: the raw-label counts test_pair_builders_real_data derives.
    assert report["by_source"]["step_rating"] == 885
    assert report["by_source"]["trace_rating"] == 130
    assert report["eval_available"] is True
    assert report["eval_traces"] == (report["train_traces"] + report["eval_traces"]) // 10 > 1
    assert report["train_pairs"] + report["eval_pairs"] + report[
        "excluded_cross_trace_pairs"] == 1015
    assert 0 < report["action_eval_pairs"] <= report["eval_pairs"]
    assert 0 < report["tool_eval_pairs"] <= report["action_eval_pairs"]
    assert report["action_train_pairs"] + report["action_eval_pairs"] == 885


def test_owner_keeps_one_accounts_traces_as_rm_create_would(tmp_path, monkeypatch, capsys):
    """Two accounts' traces in one store: --all-traces previews --owner's only (default local),
    --shared every account's opted-in ones, and another account's trace id is refused."""
    theirs = rated_trace(contribute=True)
    theirs = ImportedTrace(replace(theirs.trace, owner="ana"), theirs.feedback)
    store = sqlite_store(tmp_path, monkeypatch, [theirs])
    assert preview(capsys, "--all-traces")["traces"] == 0
    assert preview(capsys, "--all-traces", "--owner", "ana")["traces"] == 1
    assert preview(capsys, "--all-traces", "--shared")["traces"] == 1
    assert main(["pairs", "preview", "--trace-ids", RATED_ID]) == 2
    assert f"trace {RATED_ID} is not one of local's traces (--owner" in capsys.readouterr().err
    store.dispose()
