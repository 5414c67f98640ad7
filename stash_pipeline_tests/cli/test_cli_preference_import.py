"""Real data in, end to end through the CLI, on SQLite and PostgreSQL: the hh-rlhf data set,
TRL files, and verified outcomes in an OpenAI-format file's metadata."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

from stash_pipeline.cli import main
from stash_pipeline.importers import read_path
from stash_pipeline.store import schema
from stash_pipeline_tests.support.cli_helpers import cli_store, run_json  # noqa: F401 - a fixture

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
HH_DEV = DATA / "hh-rlhf" / "harmless-base-dev.jsonl.gz"
RETAIL_RUNS = sorted((DATA / "tau2-bench" / "runs").glob("retail_*.json"))


def valid_hh_records(path: Path) -> int:
    """An independent count: records whose sides share everything before their last
    "\\n\\nAssistant:" and end in two different non-empty replies."""
    count = 0
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            chosen_prompt, _, chosen = record["chosen"].rpartition("\n\nAssistant:")
            rejected_prompt, _, rejected = record["rejected"].rpartition("\n\nAssistant:")
            if chosen_prompt != rejected_prompt or "\n\nHuman:" in chosen + rejected:
                continue
            if chosen.strip() and rejected.strip() and chosen.strip() != rejected.strip():
                count += 1
    return count


def table_rows(store, table) -> list[dict]:
    with store.reading() as connection:
        return [dict(row._mapping) for row in connection.execute(
            table.select().order_by(table.c.id))]


def test_hh_rlhf_imports_in_one_command_and_reimports_as_a_no_op(cli_store, capsys):
    expected = valid_hh_records(HH_DEV)
    assert 1000 < expected < 1096
    summary = run_json(capsys, "import", str(HH_DEV), "--format", "preference", "--author",
                       "labeler", "--reviewer", "qa")
    assert summary["comparisons"] == expected and summary["imported"] == 2 * expected
    assert summary["skipped_invalid"] == 1096 - expected
    assert summary["by_format"] == {"preference": 2 * expected}
    report = run_json(capsys, "pairs", "preview", "--all-traces", "--max-pairs", "100000")
    assert report["pairs"] == expected
    assert report["by_source"]["reviewed_comparison"] == expected
    assert report["action_pairs"] == expected
    comparisons = table_rows(cli_store, schema.reviewed_comparisons)
    assert len(comparisons) == expected
    assert {(c["author"], c["reviewer"], c["status"]) for c in comparisons} == {
        ("labeler", "qa", "approved")}

    traces_before = table_rows(cli_store, schema.traces)
    again = run_json(capsys, "import", str(HH_DEV), "--author", "labeler", "--reviewer", "qa")
    assert (again["imported"], again["updated"], again["unchanged"]) == (0, 0, 2 * expected)
    assert table_rows(cli_store, schema.traces) == traces_before  # versions, times: all kept
    assert table_rows(cli_store, schema.reviewed_comparisons) == comparisons


def test_the_records_that_hold_no_comparison_are_skipped_and_named(cli_store, capsys):
    """hh-rlhf's own file with the defaults: one empty reply and four records whose sides differ
    before their last turn are skipped, each named with its reason, and counted."""
    assert main(["import", str(HH_DEV)]) == 0
    out, err = capsys.readouterr()
    assert "record line 256, field 'chosen': the last assistant turn of 'chosen' is empty" in err
    assert ("Skipped 5 records (each reason above): line 256, line 609, line 938, line 939, "
            "line 978.") in out


def test_a_malformed_record_refuses_the_file_naming_the_option_that_skips_it(cli_store, capsys,
                                                                             tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps({"prompt": "2+2=", "chosen": "4", "rejected": "5"}) + "\n"
                    + json.dumps({"prompt": "2+2=", "chosen": "4"}) + "\n")
    assert main(["import", str(path)]) == 2
    error = capsys.readouterr().err
    assert "record line 2, field 'rejected': a preference record needs 'rejected'" in error
    assert "--skip-invalid" in error
    assert table_rows(cli_store, schema.traces) == []
    assert run_json(capsys, "import", str(path), "--skip-invalid")["skipped_invalid"] == 1


def test_trl_files_standard_and_conversational(cli_store, capsys, tmp_path):
    standard = tmp_path / "standard.jsonl"
    standard.write_text("".join(json.dumps(r) + "\n" for r in [
        {"prompt": "2+2=", "chosen": "4", "rejected": "5"},
        {"prompt": "The capital of France is", "chosen": " Paris", "rejected": " Rome"},
    ]))
    conversational = tmp_path / "conversational.jsonl"
    conversational.write_text("".join(json.dumps(r) + "\n" for r in [
        {"prompt": [{"role": "user", "content": "Hi"}],
         "chosen": [{"role": "assistant", "content": "Hello! How can I help?"}],
         "rejected": [{"role": "assistant", "content": "What."}]},
        {"chosen": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}],
         "rejected": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Go"}]},
    ]))
    summary = run_json(capsys, "import", str(standard), str(conversational))
    assert summary["comparisons"] == 4 and summary["imported"] == 8
    report = run_json(capsys, "pairs", "preview", "--all-traces")
    assert report["by_source"]["reviewed_comparison"] == 4

    malformed = tmp_path / "malformed.jsonl"
    malformed.write_text(json.dumps({"prompt": "q", "chosen": "a", "rejected": "b"}) + "\n"
                         + json.dumps({"prompt": "q", "chosen": [{"role": "user",
                                                                   "content": "a"}],
                                       "rejected": "b"}) + "\n")
    assert main(["import", str(malformed), "--format", "preference"]) == 2
    error = capsys.readouterr().err
    assert "record line 2" in error and "field 'chosen'" in error
    assert len(table_rows(cli_store, schema.traces)) == 8  # nothing of the refused file


def openai_records_with_outcomes(tmp_path: Path) -> tuple[Path, int, int]:
    """The retail tau2-bench runs rewritten as OpenAI trace objects, the verified reward in
    ``metadata.outcome``; with the count of traces and of same-task success-failure pairs."""
    records, tasks = [], defaultdict(lambda: [0, 0])
    for path in RETAIL_RUNS:
        for simulation in json.loads(path.read_text())["simulations"]:
            reward = simulation["reward_info"]["reward"]
            tasks[str(simulation["task_id"])][0 if reward >= 1.0 else 1] += 1
        for imported in read_path(path, outcome_field=None):
            trace = imported.trace
            records.append({
                "id": trace.id, "domain": trace.domain, "agent": trace.agent,
                "metadata": {"task_id": trace.task_id,
                             "outcome": imported.feedback[0].reward},
                "messages": [
                    {"role": m.role, "content": m.content,
                     **({"tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                                        for c in m.tool_calls]} if m.tool_calls else {}),
                     **({"tool_call_id": m.tool_call_id} if m.role == "tool" else {})}
                    for m in trace.messages],
            })
    path = tmp_path / "retail-openai.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path, len(records), sum(wins * losses for wins, losses in tasks.values())


def test_metadata_outcome_in_openai_traces_gives_outcome_pairs(cli_store, capsys, tmp_path):
    assert RETAIL_RUNS, f"real data missing under {DATA}"
    path, traces, expected_pairs = openai_records_with_outcomes(tmp_path)
    assert expected_pairs > 0
    summary = run_json(capsys, "import", str(path))
    assert summary["by_format"] == {"openai": traces}
    assert summary["outcomes"] == traces
    outcomes = table_rows(cli_store, schema.verified_outcomes)
    assert len(outcomes) == traces and {o["source"] for o in outcomes} == {"metadata.outcome"}
    report = run_json(capsys, "pairs", "preview", "--all-traces", "--max-pairs", "100000")
    assert report["by_source"]["verified_outcome"] == expected_pairs


def test_outcome_field_names_another_path_or_none(cli_store, capsys, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "t1", "metadata": {"eval": {"passed": True}},
                                "messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "hello"}]}) + "\n")
    quiet = run_json(capsys, "import", str(path))  # the default path: no word when it finds none
    assert quiet["outcomes"] == 0 and quiet["warnings"] == [] and "outcome_field" not in quiet
    # A path given that matches no trace says so, and which metadata keys the traces have.
    assert main(["import", str(path), "--outcome-field", "eval.reward", "--json"]) == 0
    out, err = capsys.readouterr()
    wrong = json.loads(out.strip().splitlines()[-1])
    assert (wrong["outcomes"], wrong["outcome_field_matched"]) == (0, 0)
    assert wrong["warnings"] == [
        "the outcome field metadata.eval.reward matched nothing: none of the 1 traces has a value "
        "there, so no verified outcome was read from it; the traces' metadata has eval"]
    assert f"warning: {wrong['warnings'][0]}" in err
    right = run_json(capsys, "import", str(path), "--outcome-field", "metadata.eval.passed")
    assert (right["outcomes"], right["outcome_field_matched"], right["warnings"]) == (1, 1, [])
    (outcome,) = table_rows(cli_store, schema.verified_outcomes)
    assert (outcome["trace_id"], outcome["reward"]) == ("t1", 1.0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "t2", "metadata": {"outcome": "success"},
                               "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    assert main(["import", str(bad)]) == 2
    error = capsys.readouterr().err
    assert "record line 1" in error and "field 'metadata.outcome'" in error
