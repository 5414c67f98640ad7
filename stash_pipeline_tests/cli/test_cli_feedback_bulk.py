"""Feedback in bulk through the CLI, on SQLite and PostgreSQL: comparisons and reviews in a trace
file's feedback list, `feedback import FILE`, many ids for `feedback review` and `traces
contribute`."""

from __future__ import annotations

import json

from stash_pipeline.cli import main
from stash_pipeline.core.feedback import ReviewedComparison
from stash_pipeline_tests.support.cli_helpers import cli_store, run_json  # noqa: F401 - a fixture


def trace(trace_id: str, reply: str, feedback: list | None = None) -> dict:
    return {"id": trace_id, "metadata": {"task_id": "greet"}, "feedback": feedback or [],
            "messages": [{"role": "user", "content": "Hi"},
                         {"role": "assistant", "content": reply}]}


def write_lines(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_trace_file_feedback_lists_take_comparisons_and_reviews(cli_store, capsys, tmp_path):
    first = trace("t1", "Hello! How can I help?", [
        {"type": "comparison", "chosen": "m1", "rejected": "t2/m1", "author": "ann",
         "reviewer": "qa", "status": "approved", "rationale": "friendlier"},
        {"type": "comparison", "chosen": "t1", "rejected": "t2", "author": "ann"},
    ])
    path = write_lines(tmp_path / "traces.jsonl", [first, trace("t2", "What.")])
    summary = run_json(capsys, "import", path)
    assert (summary["comparisons"], summary["imported"]) == (2, 2)
    comparisons = {c.chosen_action_id: c for c in cli_store.feedback_for(["t1"])
                   if isinstance(c, ReviewedComparison)}
    action = comparisons["t1/m1"]
    assert action.rejected_action_id == "t2/m1" and action.independently_reviewed
    assert action.rationale == "friendlier"
    pending = comparisons[None]
    assert (pending.status, pending.reviewer) == ("pending", None)

    review = trace("t3", "Hey", [{"type": "review", "comparison_id": pending.id,
                                  "reviewer": "qa"}])
    assert run_json(capsys, "import", write_lines(tmp_path / "r.jsonl", [review]))[
        "reviews"] == 1
    (reviewed,) = [c for c in cli_store.feedback_for(["t1"]) if c.id == pending.id]
    assert reviewed.status == "approved" and reviewed.independently_reviewed

    unknown = trace("t4", "Yo", [{"type": "review", "comparison_id": "nope",
                                  "reviewer": "qa"}])
    assert main(["import", write_lines(tmp_path / "u.jsonl", [unknown])]) == 2
    assert "no comparison nope" in capsys.readouterr().err
    bad_side = trace("t5", "Yo", [{"type": "comparison", "chosen": "m7", "rejected": "t2/m1"}])
    assert main(["import", write_lines(tmp_path / "b.jsonl", [bad_side])]) == 2
    assert "field 'feedback[0].chosen'" in capsys.readouterr().err
    assert sorted(cli_store.trace_ids()) == ["t1", "t2", "t3"]

    run_json(capsys, "import", write_lines(tmp_path / "bob.jsonl", [trace("b1", "Hi")]),
             "--owner", "bob")
    foreign = trace("t6", "Yo", [{"type": "comparison", "chosen": "m1", "rejected": "b1/m1"}])
    assert main(["import", write_lines(tmp_path / "f.jsonl", [foreign])]) == 2
    assert "trace 'b1' does not exist" in capsys.readouterr().err
    assert cli_store.feedback_for(["b1"]) == []


def test_feedback_import_file_is_one_transaction_naming_line_and_field(cli_store, capsys,
                                                                       tmp_path):
    run_json(capsys, "import", write_lines(tmp_path / "t.jsonl", [
        trace("t1", "Hello!"), trace("t2", "What.")]))
    items = [
        {"type": "rating", "trace_id": "t1", "action_id": "m1", "value": 1, "author": "ann"},
        {"type": "comment", "trace_id": "t2", "action_id": "t2/m1", "text": "Rude."},
        {"type": "comparison", "chosen": "t1/m1", "rejected": "t2/m1", "author": "ann"},
        {"type": "outcome", "trace_id": "t1", "reward": 1, "source": "checker"},
    ]
    bad = write_lines(tmp_path / "bad.jsonl", [*items, {"type": "rating", "trace_id": "t2"}])
    assert main(["feedback", "import", bad]) == 2
    error = capsys.readouterr().err
    assert "record line 5" in error and "field 'value'" in error
    misspelt = write_lines(tmp_path / "misspelt.jsonl", [
        *items, {"type": "rating", "trace_id": "t2", "action": "m1", "value": -1}])
    assert main(["feedback", "import", misspelt]) == 2
    error = capsys.readouterr().err
    assert "record line 5" in error and "field 'action': unknown field" in error, error
    missing = write_lines(tmp_path / "missing.jsonl", [*items, {"type": "outcome",
                                                                "trace_id": "t9", "reward": 0}])
    assert main(["feedback", "import", missing]) == 2
    assert "line 5" in capsys.readouterr().err
    assert cli_store.feedback_for(["t1", "t2"]) == []

    good = write_lines(tmp_path / "good.jsonl", items)
    counts = run_json(capsys, "feedback", "import", good)
    assert (counts["items"], counts["ratings"], counts["comments"], counts["comparisons"],
            counts["outcomes"]) == (4, 1, 1, 1, 1)
    again = run_json(capsys, "feedback", "import", good)  # stable ids: stored once
    assert again["items"] == 4 and len(cli_store.feedback_for(["t1", "t2"])) == 4
    (comparison,) = [f for f in cli_store.feedback_for(["t1"])
                     if isinstance(f, ReviewedComparison)]
    reviews = write_lines(tmp_path / "reviews.jsonl", [
        {"type": "review", "comparison_id": comparison.id, "reviewer": "qa"}])
    assert run_json(capsys, "feedback", "import", reviews)["reviews"] == 1
    assert main(["feedback", "import", good, "--owner", "mallory"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_review_and_contribute_take_many(cli_store, capsys, tmp_path):
    run_json(capsys, "import", write_lines(tmp_path / "t.jsonl", [
        trace("t1", "Hello!"), trace("t2", "What."), trace("t3", "Hey.")]))
    ids = []
    for rejected in ("t2", "t3"):
        made = run_json(capsys, "feedback", "compare", "t1/m1", f"{rejected}/m1",
                        "--author", "ann")
        ids.append(made["id"])
    assert run_json(capsys, "feedback", "review", *ids, "--reviewer", "qa")["reviews"] == 2
    assert all(c.independently_reviewed for c in cli_store.feedback_for(["t1"]))
    assert main(["feedback", "review", ids[0], "nope", "--reviewer", "bo"]) == 2
    capsys.readouterr()
    assert {c.reviewer for c in cli_store.feedback_for(["t1"])} == {"qa"}  # all or nothing

    assert main(["traces", "contribute", "t1", "t9"]) == 2
    assert "t9" in capsys.readouterr().err and cli_store.trace_ids(contribute=True) == []
    assert main(["traces", "contribute", "t1", "t2"]) == 0
    assert cli_store.trace_ids(contribute=True) == ["t1", "t2"]
    assert main(["traces", "contribute", "--all"]) == 0
    assert cli_store.trace_ids(contribute=True) == ["t1", "t2", "t3"]
    assert main(["traces", "contribute", "--all", "--off", "--owner", "local"]) == 0
    assert cli_store.trace_ids(contribute=True) == []


def test_rate_and_outcome_take_many_targets(cli_store, capsys, tmp_path):
    run_json(capsys, "import", write_lines(tmp_path / "t.jsonl", [
        trace("t1", "Hello!"), trace("t2", "What.")]))
    rated = run_json(capsys, "feedback", "rate", "t1/m1", "t2/m1", "-1")
    assert len(rated["ids"]) == 2 and rated["ratings"] == 2
    assert main(["feedback", "outcome", "t1", "t9", "1"]) == 2  # all or nothing
    capsys.readouterr()
    assert run_json(capsys, "feedback", "outcome", "t1", "t2", "0", "--source", "qa")[
        "outcomes"] == 2
    values = sorted((type(f).__name__, f.trace_id) for f in cli_store.feedback_for(["t1", "t2"]))
    assert values == [("Rating", "t1"), ("Rating", "t2"), ("VerifiedOutcome", "t1"),
                      ("VerifiedOutcome", "t2")]
    single = run_json(capsys, "feedback", "rate", "t1", "1")
    assert set(single) >= {"id", "kind"}  # one target: the one-item shape as before
