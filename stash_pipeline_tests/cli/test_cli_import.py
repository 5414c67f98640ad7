"""The command line end to end, on a real SQLite store in a temporary STASH_HOME."""

import json
from pathlib import Path

import pytest

from stash_pipeline.cli import main
from stash_pipeline_tests.support.cli_helpers import last_json
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, bound

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SAMPLES = Path(__file__).resolve().parents[2] / "stash_pipeline" / "samples" / "support-agent.jsonl"


@pytest.fixture(autouse=True)
def stash_home(tmp_path, monkeypatch, use_stash_home):
    use_stash_home(tmp_path / "stash")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return tmp_path / "stash"


def test_import_samples_prints_a_json_summary(capsys):
    assert main(["import", str(SAMPLES), "--json"]) == 0
    summary = last_json(capsys)
    assert summary["traces"] == 3 and summary["imported"] == 3 and summary["updated"] == 0
    assert summary["actions"] == 8 and summary["tool_calls"] == 2
    assert summary["comments"] == 2 and summary["ratings"] == 4 and summary["outcomes"] == 1


def test_the_summary_counts_what_the_files_held(capsys):
    assert main(["import", str(SAMPLES)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        "Feedback: 2 comments, 4 ratings, 1 outcome."  # no kind it did not hold


def test_reimport_updates_and_keeps_ids(capsys, tmp_path):
    main(["import", str(SAMPLES), "--json"])
    capsys.readouterr()
    assert main(["import", str(SAMPLES), "--json"]) == 0
    summary = last_json(capsys)  # identical content: nothing changes (issue 18)
    assert (summary["imported"], summary["updated"], summary["unchanged"]) == (0, 0, 3)
    assert main(["import", str(SAMPLES)]) == 0
    assert "(0 new, 0 updated, 3 unchanged)" in capsys.readouterr().out
    edited = tmp_path / "edited.jsonl"
    edited.write_text(SAMPLES.read_text().replace("Follow the policy.", "Follow it.", 1))
    assert main(["import", str(edited), "--json"]) == 0
    summary = last_json(capsys)
    assert (summary["updated"], summary["unchanged"]) == (1, 2)
    assert main(["traces", "show", "6f1d2c3a-0b1e-4c8e-9a51-1a2b3c4d5e01", "--json"]) == 0
    shown = last_json(capsys)
    assert shown["version"] == 2
    assert shown["actions"][:2] == ["6f1d2c3a-0b1e-4c8e-9a51-1a2b3c4d5e01/m2",
                                    "6f1d2c3a-0b1e-4c8e-9a51-1a2b3c4d5e01/m2.call0"]


def test_tau2_run_imports_with_counts_from_the_source(capsys):
    path = DATA / "tau2-bench" / "runs" / "airline_gpt-4.1.json"
    source = json.loads(path.read_text())
    sims = source["simulations"]
    calls = sum(len(m.get("tool_calls") or []) for s in sims for m in s["messages"])
    assert main(["import", str(path), "--json"]) == 0
    summary = last_json(capsys)
    assert summary["traces"] == len(sims)
    assert summary["tool_calls"] == calls
    assert summary["outcomes"] == len(sims)


def test_traces_list_shows_every_trace(capsys):
    main(["import", str(SAMPLES)])
    out = capsys.readouterr().out
    assert "Imported 3 traces" in out
    assert main(["traces", "list", "--json"]) == 0
    listing = last_json(capsys)
    assert listing["count"] == 3
    assert {row["agent"] for row in listing["traces"]} == {"support-bot", "research-bot"}
    assert main(["traces", "list"]) == 0
    assert "3 traces" in capsys.readouterr().out


def test_bad_batch_stores_nothing_and_names_file_record_field(tmp_path, capsys):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"id": "g1", "messages": [{"role": "user", "content": "hi"}]})
                    + "\n")
    bad = tmp_path / "z_bad.jsonl"
    bad.write_text(
        json.dumps({"id": "b1", "messages": [{"role": "user", "content": "hi"}]}) + "\n"
        + json.dumps({"id": "b2", "messages": [{"role": "wizard", "content": "hi"}]}) + "\n"
    )
    assert main(["import", str(tmp_path), "--json"]) == 2
    err = capsys.readouterr().err
    assert "z_bad.jsonl" in err and "line 2" in err and "messages[1].role" not in err
    assert "messages[0].role" in err and "wizard" in err
    assert main(["traces", "list", "--json"]) == 0
    assert last_json(capsys)["count"] == 0


def test_trace_owned_by_someone_else_is_refused(capsys):
    assert main(["import", str(SAMPLES), "--owner", "alice"]) == 0
    assert main(["import", str(SAMPLES), "--owner", "bob"]) == 2
    assert "6f1d2c3a-0b1e-4c8e-9a51-1a2b3c4d5e01" in capsys.readouterr().err
    main(["traces", "list", "--owner", "bob", "--json"])
    assert last_json(capsys)["count"] == 0


def test_show_unknown_trace_is_a_clear_error(capsys):
    assert main(["traces", "show", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_module_entry_point_runs(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "stash_pipeline", "--help"],
                          capture_output=True, text=True, check=True)
    assert "import" in done.stdout and "traces" in done.stdout


def test_a_reader_that_goes_away_ends_the_command_quietly(stash_home):
    """`stash-pipeline traces list | head -1`: no traceback, the exit status of SIGPIPE."""
    import os
    import subprocess
    import sys

    assert main(["import", str(SAMPLES)]) == 0
    command = [sys.executable, "-c", "import sys; from stash_pipeline.cli import main; "
               "sys.exit(main(['traces', 'list', '--json']))"]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, "STASH_HOME": str(stash_home)})
    child.stdout.close()  # before the command writes a byte: it imports for a second first
    stderr = child.stderr.read().decode()
    assert child.wait(timeout=bound(PROCESS_EXIT_S)) == 141, stderr
    assert stderr == ""
