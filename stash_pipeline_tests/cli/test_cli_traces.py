"""`traces list` (100 columns, --sort, --filter) and `traces show` (scores, a credit column)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from stash_pipeline.cli import main
from stash_pipeline.cli.store import open_store
from stash_pipeline.store import ActionScore, Release, TraceScore

SAMPLES = Path(__file__).resolve().parents[2] / "stash_pipeline" / "samples"
FIRST = "6f1d2c3a-0b1e-4c8e-9a51-1a2b3c4d5e01"
WITH_OUTCOME = "6f1d2c3a-0b1e-4c8e-9a51-1a2b3c4d5e02"
RELEASE = "20260101-000000-abcdef12"


@pytest.fixture(autouse=True)
def stash_home(tmp_path, monkeypatch, use_stash_home):
    use_stash_home(tmp_path / "stash")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert main(["import", str(SAMPLES)]) == 0
    return tmp_path / "stash"


def scored() -> str:
    """A release with credit on every action of FIRST (rising from -0.9), and a personal model's
    whole-trace score of it; returns the model's id."""
    store = open_store()
    store.save_release(Release(RELEASE, "file:///nowhere", {}, {}))
    trace = store.get_trace(FIRST)
    actions = trace.actions()
    store.save_action_scores(RELEASE, {trace.id: trace.version}, [
        ActionScore(a.id, trace.id, trace.version, RELEASE, raw=float(k),
                    credit=-0.9 + 0.6 * k) for k, a in enumerate(actions)])
    from stash_pipeline.core.requests import parse_reward_model_request

    model = store.create_reward_model("local", parse_reward_model_request(
        {"name": "mine", "trace_ids": [FIRST]}))
    store.mark_running(model.id)
    store.mark_succeeded(model.id, metrics={}, checkpoint_uri="file:///x",
                         scores=[TraceScore(trace.id, trace.version, model.id, 1.25, 0.7)],
                         scored={trace.id: trace.version})
    return model.id


def lines(capsys) -> list[str]:
    return capsys.readouterr().out.splitlines()


def test_list_fits_100_columns_and_wide_has_every_column(capsys):
    capsys.readouterr()
    assert main(["traces", "list"]) == 0
    out = lines(capsys)
    assert max(len(line) for line in out) <= 100
    assert out[0].split() == ["ID", "AGENT", "DOMAIN", "CREDIT", "SCORED", "LATEST", "STATE",
                              "OUTCOME"]
    assert any(line.startswith(FIRST + " ") for line in out)  # ids are never cut
    assert main(["traces", "list", "--wide"]) == 0
    assert "MEAN_ACTION_CREDIT" in lines(capsys)[0]


def test_list_sorts_and_filters(capsys):
    scored()
    capsys.readouterr()
    assert main(["traces", "list", "--sort=-outcome", "--json"]) == 0
    rows = json.loads(lines(capsys)[-1])["traces"]
    assert rows[0]["id"] == WITH_OUTCOME and rows[0]["outcome"] == 1.0
    assert main(["traces", "list", "--sort", "mean_action_credit", "--desc"]) == 0
    out = lines(capsys)
    assert out[1].startswith(FIRST) and "-0.300" in out[1] and "3/3" in out[1]
    assert main(["traces", "list", "--filter", "agent=research-bot", "--json"]) == 0
    assert {r["agent"] for r in json.loads(lines(capsys)[-1])["traces"]} == {"research-bot"}
    assert main(["traces", "list", "--filter", "state=scored", "--filter", "domain=airline",
                 "--json"]) == 0
    assert [r["id"] for r in json.loads(lines(capsys)[-1])["traces"]] == [FIRST]


@pytest.mark.parametrize("argument", [["--sort", "size"], ["--filter", "colour=red"],
                                      ["--filter", "state=done"], ["--filter", "agent"]])
def test_list_refuses_a_bad_sort_or_filter(capsys, argument):
    assert main(["traces", "list", *argument]) == 2
    assert f"field '{argument[0][2:]}'" in capsys.readouterr().err


def test_show_prints_scores_and_a_credit_column(capsys):
    model_id = scored()
    capsys.readouterr()
    assert main(["traces", "show", FIRST]) == 0
    out = lines(capsys)
    text = "\n".join(out)
    assert f"shared evaluator: scored (release {RELEASE})" in text
    assert "score: personal mine  raw +1.2500  calibrated 0.700" in text
    assert f"credit column 1: shared {RELEASE}" in text
    assert "\033[" not in text  # no colour in a pipe
    action_lines = [line for line in out if not line.startswith("feedback") and (
        " m2 " in line or " m2.call0 " in line or " m4 " in line)]
    credits = [next(w for w in line.split() if w[0] in "+-" and "." in w) for line in
               action_lines]
    assert credits == ["-0.90", "-0.30", "+0.30"]
    assert main(["traces", "show", FIRST, "--json"]) == 0
    shown = json.loads(lines(capsys)[-1])
    assert [s["evaluator"] for s in shown["scores"]] == [model_id]
    assert len(shown["action_scores"]) == 3 and shown["shared_evaluator"]["status"] == "scored"
    assert {s["kind"] for s in shown["action_scores"]} == {"shared"}


def test_show_colours_credit_on_a_terminal(capsys, monkeypatch):
    scored()
    capsys.readouterr()
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(["traces", "show", FIRST]) == 0
    out = capsys.readouterr().out
    assert "\033[1;31m -0.90\033[0m" in out and "\033[31m -0.30\033[0m" in out
    monkeypatch.setenv("NO_COLOR", "1")
    assert main(["traces", "show", FIRST]) == 0
    assert "\033[" not in capsys.readouterr().out


MULTI_LINE = {"id": "multi-line", "messages": [
    {"role": "system", "content": "You are a travel agent.\nRules:\n- confirm first"},
    {"role": "user", "content": "Move my trip."},
    {"role": "assistant", "content": "Which day?\nI can offer Tuesday.",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "lookup", "arguments": "{\"day\": \"Tue\"}"}}]}],
    "feedback": [{"type": "comment", "text": "Ask first.\nThen move it.", "action_id": "m2"},
                 {"type": "rating", "value": -1, "action_id": "m2.call0"}]}


def test_list_puts_the_newest_import_first(capsys, tmp_path):
    newest = tmp_path / "newest.jsonl"
    newest.write_text(json.dumps(MULTI_LINE) + "\n")
    assert main(["import", str(newest)]) == 0
    capsys.readouterr()
    assert main(["traces", "list"]) == 0
    out = lines(capsys)
    assert out[1].startswith("multi-line ")
    assert out[-2].startswith("22 traces of local, newest first")
    assert main(["traces", "list", "--sort", "created"]) == 0
    out = lines(capsys)
    assert out[-3].startswith("multi-line ")
    assert out[-2].startswith("22 traces of local, oldest first")


def test_show_keeps_multi_line_text_in_its_column_and_says_feedback_in_words(capsys, tmp_path):
    path = tmp_path / "multi.jsonl"
    path.write_text(json.dumps(MULTI_LINE) + "\n")
    assert main(["import", str(path), "--owner", "ana"]) == 0
    capsys.readouterr()
    assert main(["traces", "show", "multi-line", "--owner", "ana"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "trace multi-line  owner=ana  version=1  contribute=no"  # nothing unset shown
    body = out[out.index(next(line for line in out if line.startswith("[0]"))):]
    assert body == [
        "[0] system             You are a travel agent.",
        "                       Rules:",
        "                       - confirm first",
        "[1] user               Move my trip.",
        "[2] assistant m2       Which day?",
        "                       I can offer Tuesday.",
        '              m2.call0 -> lookup({"day": "Tue"})',
        "feedback (2):",
        '  comment on m2: "Ask first.',
        '    Then move it."',
        "  rating -1 on m2.call0",
    ]
    assert main(["traces", "show", "multi-line", "--owner", "local"]) == 2
    assert "trace multi-line does not exist" in capsys.readouterr().err


def test_list_shows_the_callers_traces_and_every_account_only_when_asked(capsys, tmp_path):
    """Issue 52.2: the listed ids are the ones `rm create` (default account) accepts."""
    path = tmp_path / "multi.jsonl"
    path.write_text(json.dumps(MULTI_LINE) + "\n")
    assert main(["import", str(path), "--owner", "ana"]) == 0
    capsys.readouterr()
    assert main(["traces", "list", "--json"]) == 0
    mine = json.loads(capsys.readouterr().out)
    assert mine["owner"] == "local" and "multi-line" not in {t["id"] for t in mine["traces"]}
    assert {t["owner"] for t in mine["traces"]} == {"local"} and mine["count"] == 21
    assert main(["traces", "list", "--owner", "ana", "--json"]) == 0
    assert [t["id"] for t in json.loads(capsys.readouterr().out)["traces"]] == ["multi-line"]
    assert main(["traces", "list", "--all-accounts", "--json"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert every["owner"] is None and every["count"] == 22
    assert main(["traces", "list", "--all-accounts"]) == 0
    out = lines(capsys)
    assert out[0].split()[:2] == ["ID", "OWNER"] and max(len(line) for line in out) <= 100
    assert out[-2].startswith("22 traces of every account, newest first")
    with pytest.raises(SystemExit):  # one or the other
        main(["traces", "list", "--all-accounts", "--owner", "ana"])


def test_create_wait_without_an_extraction_key_is_refused_before_anything_is_queued(
        capsys, monkeypatch):
    """Issue 52.1: the samples' comments need the extraction model; with --wait the run would
    be made here, where no key is set: said at once, and no model is queued."""
    monkeypatch.setenv("STASH_EXTRACTION", "on")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    capsys.readouterr()
    assert main(["rm", "create", "--name", "m", "--all-traces", "--wait"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: feedback extraction needs an Anthropic API key: ")
    assert "Set ANTHROPIC_API_KEY, or STASH_EXTRACTION=off" in line
    assert main(["rm", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 0
