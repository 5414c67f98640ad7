"""`traces list`'s search options, `traces export` and `review next|list|done|skip|reopen|
assign`, on the embedded default store."""

from __future__ import annotations

import csv
import json
from datetime import date, timedelta
from pathlib import Path

import pytest

from stash_pipeline.cli import main
from stash_pipeline.cli.store import open_store
from stash_pipeline.store import ActionScore, Release

SAMPLES = Path(__file__).resolve().parents[2] / "stash_pipeline" / "samples"
RELEASE = "20260101-000000-abcdef12"
# Fresh traces nobody has reviewed: (id, what the user asks, the tool called, outcome, credit).
FRESH = (("fresh-0", "Please refund my ticket", "get_reservation", 0.0, 0.6),
         ("fresh-1", "Change my seat to an aisle", "update_seat", 1.0, -0.5),
         ("fresh-2", "Is my flight on time?", "get_flight_status", None, 0.05),
         ("fresh-3", "Refund the hotel too", "get_reservation", 1.0, 0.3))


def _record(trace_id: str, text: str, tool: str, outcome: float | None) -> dict:
    metadata = {"task_id": f"task-{trace_id}"}
    if outcome is not None:
        metadata["outcome"] = outcome
    return {"id": trace_id, "agent": "desk", "domain": "travel", "metadata": metadata,
            "messages": [{"role": "system", "content": "Be helpful."},
                         {"role": "user", "content": text},
                         {"role": "assistant", "content": "Let me look.", "tool_calls": [
                             {"id": "c0", "name": tool, "arguments": {"q": text}}]},
                         {"role": "tool", "tool_call_id": "c0", "content": "{}"},
                         {"role": "assistant", "content": "Done."}]}


@pytest.fixture(autouse=True)
def stash_home(tmp_path, monkeypatch, use_stash_home):
    use_stash_home(tmp_path / "stash")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    fresh = tmp_path / "fresh.jsonl"
    fresh.write_text("".join(json.dumps(_record(*row[:4])) + "\n" for row in FRESH))
    assert main(["import", str(SAMPLES)]) == 0
    assert main(["import", str(fresh)]) == 0
    store = open_store()
    store.save_release(Release(RELEASE, "file:///nowhere", {}, {}))
    for trace_id, *_, credit in FRESH:
        trace = store.get_trace(trace_id)
        store.save_action_scores(RELEASE, {trace.id: 1}, [
            ActionScore(a.id, trace.id, 1, RELEASE, raw=credit, credit=credit)
            for a in trace.actions()])
    return tmp_path


def ids(capsys, *args: str) -> list[str]:
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out.splitlines()[-1])
    return [row["id"] for row in payload.get("traces", payload.get("items", []))]


def test_traces_list_searches(capsys):
    assert sorted(ids(capsys, "traces", "list", "--search", "REFUND")) == ["fresh-0", "fresh-3"]
    assert ids(capsys, "traces", "list", "--tool", "get_reservation", "--outcome",
               "succeeded", "--filter", "domain=travel") == ["fresh-3"]
    assert ids(capsys, "traces", "list", "--task", "task-fresh-1") == ["fresh-1"]
    assert ids(capsys, "traces", "list", "--credit-min", "0.1", "--credit-max", "0.5") == [
        "fresh-3"]
    assert ids(capsys, "traces", "list", "--filter", "q=aisle") == ["fresh-1"]
    today = date.today()
    assert len(ids(capsys, "traces", "list", "--since", today.isoformat())) == 25
    assert ids(capsys, "traces", "list", "--until", str(today - timedelta(days=2))) == []
    open_store().save_filter("local", "refunds", {"q": "refund"})
    assert ids(capsys, "traces", "list", "--saved", "refunds", "--outcome", "failed") == [
        "fresh-0"]
    capsys.readouterr()
    assert main(["traces", "list", "--search", "refund"]) == 0
    assert "2 traces" in capsys.readouterr().out


@pytest.mark.parametrize("argument,field", [(["--credit-min", "5"], "credit_min"),
                                            (["--since", "soon"], "created_from"),
                                            (["--filter", "outcome=won"], "filter"),
                                            (["--saved", "nothing"], None)])
def test_bad_searches_say_what_is_wrong(capsys, argument, field):
    assert main(["traces", "list", *argument]) == 2
    err = capsys.readouterr().err
    assert (f"field '{field}'" in err) if field else "no saved filter nothing" in err


def test_traces_export(capsys, tmp_path):
    out = tmp_path / "refunds.csv"
    assert main(["traces", "export", "--search", "refund", "--format", "csv", "-o",
                 str(out)]) == 0
    assert "2 trace(s) written" in capsys.readouterr().err
    rows = list(csv.DictReader(out.open()))
    assert [(r["id"], r["preview"]) for r in rows] == [("fresh-0", "Please refund my ticket"),
                                                       ("fresh-3", "Refund the hotel too")]
    assert main(["traces", "export", "fresh-1"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    record = json.loads(line)
    assert record["id"] == "fresh-1" and record["summary"]["mean_action_credit"] == -0.5
    # OpenAI's shape (issue 52.5): the call's name under function, its arguments a JSON string.
    assert record["messages"][2]["tool_calls"] == [
        {"id": "c0", "type": "function", "function": {
            "name": "update_seat", "arguments": '{"q": "Change my seat to an aisle"}'}}]


def test_jsonl_export_imports_back_as_the_same_traces(capsys, tmp_path):
    """Every sample (text, tool calls with nested and non-ASCII arguments, tool results, errors)
    round-trips: export, then the importer's auto-detection, give the stored traces."""
    odd = tmp_path / "odd.jsonl"
    odd.write_text(json.dumps({"id": "odd", "messages": [
        {"role": "user", "content": "Zürich → 東京?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "k", "type": "function", "function": {
                "name": "route", "arguments": '{"to":"東京","via":[{"city":"Zürich"}],"n":1.5}'}},
            {"id": "e", "name": "noop", "arguments": {}}]},
        {"role": "tool", "tool_call_id": "k", "name": "route", "content": "no", "error": True},
        {"role": "tool", "tool_call_id": "e", "content": ""}]}) + "\n")
    assert main(["import", str(odd)]) == 0
    out = tmp_path / "all.jsonl"
    assert main(["traces", "export", "-o", str(out)]) == 0
    from stash_pipeline.importers import read_path

    back = {r.trace.id: r.trace for r in read_path(out)}
    stored = {t.id: t for t in open_store().get_traces(list(back))}
    assert len(back) == 26 and set(back) == set(stored)
    for trace_id, trace in back.items():
        want = stored[trace_id]
        assert (trace.messages, trace.tools, trace.agent, trace.domain, trace.metadata) == (
            want.messages, want.tools, want.agent, want.domain, want.metadata), trace_id
    calls = [c for line in out.read_text().splitlines()
             for m in json.loads(line)["messages"] for c in m.get("tool_calls", ())]
    assert calls and all(set(c) == {"id", "type", "function"} and
                         isinstance(c["function"]["arguments"], str) for c in calls)


def test_review_next_list_done_skip_and_assign(capsys):
    # Only the fresh traces are unreviewed (every sample has feedback); no personal model, so
    # the release's verdict decides: fresh-0 failed with positive credit, fresh-1 succeeded
    # with negative credit (the outcome contradicts both; the larger first), fresh-2 is near
    # the reference, fresh-3 goes by score.
    assert ids(capsys, "review", "list") == ["fresh-0", "fresh-1", "fresh-2", "fresh-3"]
    assert main(["review", "list"]) == 0
    out = capsys.readouterr().out
    assert "outcome" in out and "near_reference" in out and "reviewed 21 of 25, 4 left" in out
    capsys.readouterr()
    assert main(["review", "next", "--json"]) == 0
    found = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert found["item"]["id"] == "fresh-0" and found["item"]["focus_action"] == "fresh-0/m4"
    assert main(["review", "next"]) == 0
    text = capsys.readouterr().out
    assert "trace fresh-0: the evaluator's verdict contradicts the verified outcome" in text
    assert "first user message: Please refund my ticket" in text
    assert main(["review", "done", "fresh-0"]) == 0
    assert main(["review", "skip", "fresh-1"]) == 0
    assert ids(capsys, "review", "list") == ["fresh-2", "fresh-3", "fresh-1"]
    assert main(["review", "assign", "fresh-3", "--to", "bo"]) == 0
    assert ids(capsys, "review", "list", "--assignee", "bo") == ["fresh-3"]
    assert ids(capsys, "review", "list", "--unassigned", "--search", "refund") == []
    assert main(["review", "reopen", "fresh-0", "fresh-1"]) == 0
    assert ids(capsys, "review", "list")[:2] == ["fresh-0", "fresh-1"]
    assert main(["review", "done", "fresh-0", "no-such-trace"]) == 2
    assert "no item no-such-trace of yours; nothing was changed" in capsys.readouterr().err
    assert ids(capsys, "review", "list")[0] == "fresh-0"


def test_review_comparisons_filed_by_others(capsys):
    capsys.readouterr()
    assert main(["feedback", "compare", "fresh-3", "fresh-2", "--author", "ana", "--json"]) == 0
    comparison = json.loads(capsys.readouterr().out.splitlines()[-1])["id"]
    found = ids(capsys, "review", "list")
    assert found[0] == comparison and "fresh-3" not in found  # compared: annotated
    assert ids(capsys, "review", "list", "--reviewer", "ana")[0] == "fresh-0"
    assert ids(capsys, "review", "list", "--kind", "comparison") == [comparison]
    assert main(["review", "skip", "--comparisons", comparison]) == 0
    assert ids(capsys, "review", "list")[-1] == comparison
    assert main(["feedback", "review", comparison, "--reviewer", "local"]) == 0
    assert ids(capsys, "review", "list", "--kind", "comparison") == []


def test_a_change_at_an_old_version_is_refused_with_the_state_now(capsys):
    """Issue 51.6: `review next` names the item's version; a change at an older one (someone
    else's came first) changes nothing and says what the item is now."""
    capsys.readouterr()
    assert main(["review", "next"]) == 0
    out = capsys.readouterr().out
    first = next(line for line in out.splitlines() if line.startswith("trace "))
    trace_id = first.split()[1].rstrip(":")
    assert f"review done {trace_id} --version 0" in out
    assert main(["review", "assign", trace_id, "--to", "bo", "--version", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["versions"] == [
        {"kind": "trace", "id": trace_id, "version": 1}]
    assert main(["review", "done", trace_id, "--version", "0"]) == 2
    err = capsys.readouterr().err
    assert f"trace {trace_id} was changed by someone else" in err and "assigned to bo" in err
    assert trace_id in ids(capsys, "review", "list")  # not marked reviewed
    assert main(["review", "done", trace_id, "--version", "1"]) == 0
    assert trace_id not in ids(capsys, "review", "list")
    with pytest.raises(SystemExit):
        main(["review", "done", trace_id, "--version", "x"])
    assert main(["review", "done", trace_id, "fresh-1", "--version", "2"]) == 2
    assert "--version goes with one ID" in capsys.readouterr().err

    assert main(["feedback", "compare", "fresh-3", "fresh-2", "--author", "ana", "--json"]) == 0
    comparison = json.loads(capsys.readouterr().out.splitlines()[-1])["id"]
    assert main(["feedback", "review", comparison, "--reviewer", "bo", "--version", "0",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 1
    assert main(["feedback", "review", comparison, "--reviewer", "cy", "--reject",
                 "--version", "0"]) == 2
    assert "approved by bo" in capsys.readouterr().err
