"""The README's commands as a newcomer types them: in a fresh directory, with nothing set, so
``STASH_HOME`` is the documented relative default ``./.stash``. Every kind of worker job runs as a
real process (training, Score again of a personal model and of the release, the shared
evaluator's candidate, benchmark and auto-scoring, a personal model's auto-scoring), and a
relative ``STASH_HOME`` from another working directory reaches the same store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, bound

pytestmark = [pytest.mark.slow, pytest.mark.worker_process]
SAMPLES = Path(__file__).resolve().parents[2] / "stash_pipeline" / "samples"
COMMAND = Path(sys.executable).with_name("stash-pipeline")  # what `scripts/venv.sh` installs
# Every setting the project reads: none reaches the commands.
SETTINGS = ("STASH_", "DAGSTER_", "RM_", "S3_", "DATABASE_URL", "MODAL_", "ANTHROPIC_")
TRACE = "6f1d2c3a-0b1e-4c8e-9a51-1a2b3c4d5e01"  # a sample trace of the account `local`
# What a running daemon's tick of the background scoring sensor does.
DAEMON_TICK = ("from stash_pipeline.dagster_runs.in_process import run_sensor_requests\n"
               "from stash_pipeline.dagster_runs.instance import definitions, get_instance\n"
               "runs = run_sensor_requests(get_instance(), definitions(), "
               "'pending_scoring')\n"
               "assert runs and all(run.is_success for run in runs), runs\n")


def test_the_readmes_commands_work_from_a_fresh_directory_with_nothing_set(tmp_path,
                                                                           pipeline_base_model):
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "samples").symlink_to(SAMPLES)  # every path the commands name is relative
    (fresh / "base").symlink_to(pipeline_base_model)
    env = {k: v for k, v in os.environ.items() if not k.startswith(SETTINGS)}
    env["STASH_EXTRACTION"] = "off"  # as scripts/main.sh: no model provider here

    def run(*args: str, cwd: Path = fresh, **extra: str) -> subprocess.CompletedProcess:
        done = subprocess.run(args, cwd=cwd, env={**env, **extra}, capture_output=True,
                              text=True, timeout=bound(PROCESS_EXIT_S))
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def cli(*args: str, **kwargs) -> dict:
        done = run(str(COMMAND), *args, "--json", **kwargs)
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert cli("import", "samples")["traces"] == 21
    cli("import", "samples/shared", "--owner", "ana", "--contribute")
    model = cli("rm", "create", "--name", "first", "--all-traces", "--base-model", "base",
                "--wait")
    assert model["status"] == "succeeded", model["error"]
    assert model["base_model"] == str(fresh / "base")  # a local path, made absolute
    released = cli("evaluator", "train", "--base-model", "base", "--epochs", "3", "--wait")
    assert released["released"], released
    assert cli("evaluator", "score-pending", "--wait")["pending"] == 0
    cli("traces", "score", TRACE, "--wait")
    cli("traces", "score", TRACE, "--model", model["id"], "--wait")
    assert cli("rm", "score", model["id"], "--wait")["status"] == "succeeded"
    changed = fresh / "changed.jsonl"  # a trace changed after the model: auto-scoring's work
    record = json.loads((SAMPLES / "support-agent.jsonl").read_text().splitlines()[0])
    record["messages"].append({"role": "user", "content": "Thanks."})
    changed.write_text(json.dumps(record) + "\n")
    cli("import", changed.name)
    run(sys.executable, "-c", DAEMON_TICK)
    [trace] = [t for t in cli("traces", "list")["traces"] if t["id"] == record["id"]]
    assert trace["personal_state"] == "scored", trace

    home = fresh / ".stash"
    assert {"dagster", "jobs", "objects", "stash.db"} <= {p.name for p in home.iterdir()}
    assert [p for p in tmp_path.rglob(".stash") if p != home] == []
    # A relative STASH_HOME from another working directory is the same store, for a worker job
    # too.
    elsewhere = fresh / "elsewhere"
    elsewhere.mkdir()
    again = cli("rm", "score", model["id"], "--wait", cwd=elsewhere, STASH_HOME="../.stash")
    assert again["status"] == "succeeded" and again["id"] == model["id"]
    assert not (elsewhere / ".stash").exists()
