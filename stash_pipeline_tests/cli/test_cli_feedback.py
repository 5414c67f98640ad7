"""Feedback intake and contribution opt-in from the command line, on a real SQLite store."""

import json
from pathlib import Path

import pytest

from stash_pipeline.cli import main

SAMPLES = Path(__file__).resolve().parents[2] / "stash_pipeline" / "samples" / "support-agent.jsonl"
T1 = "6f1d2c3a-0b1e-4c8e-9a51-1a2b3c4d5e01"
T2 = "6f1d2c3a-0b1e-4c8e-9a51-1a2b3c4d5e02"


@pytest.fixture(autouse=True)
def imported(tmp_path, monkeypatch, capsys, use_stash_home):
    use_stash_home(tmp_path / "stash")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert main(["import", str(SAMPLES)]) == 0
    capsys.readouterr()


def feedback_types(capsys, trace_id: str) -> list[dict]:
    assert main(["traces", "show", trace_id, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["feedback"]


def test_comment_on_an_action_is_stored(capsys):
    assert main(["feedback", "comment", f"{T2}/m4", "Good: it asked before booking.",
                 "--author", "ana", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["comments"] == 1
    comments = [f for f in feedback_types(capsys, T2) if f["type"] == "Comment"]
    assert [(c["action_id"], c["text"], c["author"]) for c in comments] == [
        (f"{T2}/m4", "Good: it asked before booking.", "ana")]


def test_rating_again_replaces_the_earlier_value(capsys):
    for value in ("1", "-1"):
        assert main(["feedback", "rate", f"{T2}/m2.call0", value, "--author", "ana"]) == 0
    ratings = [f for f in feedback_types(capsys, T2)
               if f["type"] == "Rating" and f["action_id"] == f"{T2}/m2.call0"]
    assert [r["value"] for r in ratings] == [-1.0]


def comparisons(capsys, trace_id: str) -> list[dict]:
    return [f for f in feedback_types(capsys, trace_id) if f["type"] == "ReviewedComparison"]


def test_a_comparison_is_pending_until_someone_else_approves_it(capsys):
    assert main(["feedback", "compare", T2, T1, "--author", "ana", "--rationale", "asked first",
                 "--json"]) == 0
    comparison_id = json.loads(capsys.readouterr().out.splitlines()[-1])["id"]
    [stored] = comparisons(capsys, T1)
    assert (stored["chosen_trace_id"], stored["rejected_trace_id"]) == (T2, T1)
    assert (stored["status"], stored["author"], stored["reviewer"]) == ("pending", "ana", None)

    # Its own author's approval is recorded, and said not to be independent.
    assert main(["feedback", "review", comparison_id, "--reviewer", "ana", "--json"]) == 0
    review = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert review["status"] == "approved" and review["independently_reviewed"] is False
    assert main(["feedback", "review", comparison_id, "--reviewer", "lead", "--json"]) == 0
    review = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (review["reviewer"], review["independently_reviewed"]) == ("lead", True)
    assert main(["feedback", "review", comparison_id, "--reviewer", "lead", "--reject"]) == 0
    [stored] = comparisons(capsys, T1)
    assert (stored["status"], stored["author"]) == ("rejected", "ana")


def test_a_comparison_needs_its_author_and_a_reviewed_status_its_reviewer(capsys):
    with pytest.raises(SystemExit):
        main(["feedback", "compare", T2, T1])
    assert "--author" in capsys.readouterr().err
    assert main(["feedback", "compare", T2, T1, "--author", "ana", "--status", "approved"]) == 2
    assert "needs its --reviewer" in capsys.readouterr().err
    assert main(["feedback", "compare", T2, T1, "--author", "ana", "--reviewer", "lead",
                 "--status", "approved"]) == 0
    [stored] = comparisons(capsys, T1)
    assert (stored["status"], stored["reviewer"]) == ("approved", "lead")


def test_reviewing_an_unknown_or_another_owners_comparison_is_not_found(capsys):
    assert main(["feedback", "review", "no-such-comparison", "--reviewer", "lead"]) == 2
    assert "no comparison" in capsys.readouterr().err
    assert main(["feedback", "compare", T2, T1, "--author", "ana", "--json"]) == 0
    comparison_id = json.loads(capsys.readouterr().out.splitlines()[-1])["id"]
    assert main(["feedback", "review", comparison_id, "--reviewer", "x", "--owner", "mallory"]) == 2
    assert comparisons(capsys, T1)[0]["status"] == "pending"


def test_outcome(capsys):
    assert main(["feedback", "outcome", T1, "0", "--source", "manual check"]) == 0
    assert any(f["type"] == "VerifiedOutcome" and f["reward"] == 0
               for f in feedback_types(capsys, T1))


def test_comparing_an_action_with_a_trace_is_refused(capsys):
    assert main(["feedback", "compare", f"{T2}/m4", T1, "--author", "ana"]) == 2
    assert "two actions or two whole traces" in capsys.readouterr().err


@pytest.mark.parametrize("target", [f"{T1}/m9", "no-such-trace", f"{T1}/m1"])
def test_unknown_targets_are_refused_and_nothing_is_written(capsys, target):
    before = feedback_types(capsys, T1)
    assert main(["feedback", "comment", target, "hm"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert feedback_types(capsys, T1) == before


def test_another_owners_trace_is_not_found(capsys):
    assert main(["feedback", "rate", T1, "1", "--owner", "mallory"]) == 2
    assert T1 in capsys.readouterr().err


def test_contribution_opt_in_and_out(capsys):
    assert main(["traces", "contribute", T1]) == 0
    assert main(["traces", "show", T1, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["contribute"] is True
    assert main(["traces", "contribute", T1, "--off"]) == 0
    assert main(["traces", "show", T1, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["contribute"] is False
    assert main(["traces", "contribute", T1, "--owner", "mallory"]) == 2
