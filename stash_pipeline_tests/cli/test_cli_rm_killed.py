"""A `rm create --wait` killed with SIGKILL mid-training holds nothing (issue 22): the model reads
failed with the reason, the worker stops, the reward_worker slot is free, the attempt's job
directory keeps only its log and `rm retry` works."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from stash_pipeline.cli import main
from stash_pipeline.compute.contract import job_directory
from stash_pipeline.compute.run import job_dirs_of
from stash_pipeline.pipelines.personal_training import attempt_name
from stash_pipeline_tests.support.cli_helpers import home, last_json  # noqa: F401 - fixtures
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, wait_until

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

# The real worker, paused inside its training phase once it got there (it writes its pid first).
PAUSING_WORKER = """
import os, sys, time
from contextlib import contextmanager
from pathlib import Path
from stash_pipeline.worker import runner

phase = runner.Phases.__call__

@contextmanager
def pausing_phase(self, name):
    with phase(self, name):
        if name == "training":
            Path(os.environ["PAUSED_AT"]).write_text(str(os.getpid()))
            while True:
                time.sleep(0.05)
        yield

runner.Phases.__call__ = pausing_phase
sys.exit(runner.main(sys.argv[1]))
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] not in "ZX"


def test_a_killed_wait_fails_its_model_frees_the_pool_and_retry_succeeds(
        home, pipeline_base_model, tmp_path, capsys):
    script = tmp_path / "pausing_worker.py"
    script.write_text(PAUSING_WORKER)
    wrapper = tmp_path / "worker-python"  # called as RM_WORKER_PYTHON -m stash_pipeline.worker DIR
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$3"\n')
    wrapper.chmod(0o755)
    paused_at = tmp_path / "paused"
    env = {**os.environ, "RM_WORKER_PYTHON": str(wrapper), "PAUSED_AT": str(paused_at),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = subprocess.Popen(
        [sys.executable, "-m", "stash_pipeline", "rm", "create", "--name", "killed",
         "--all-traces", "--base-model", str(pipeline_base_model), "--wait"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: paused_at.exists() and paused_at.read_text(),
                   timeout_s=PROCESS_EXIT_S, what="training", interval_s=0.1)
    finally:
        command.kill()  # SIGKILL: nothing of the command runs after this
        command.wait()
    worker = int(paused_at.read_text())
    # The worker is told its caller died (SIGTERM) and stops instead of training on.
    wait_until(lambda: not alive(worker), timeout_s=PROCESS_EXIT_S, what="the worker to stop",
               interval_s=0.1)

    assert main(["rm", "list", "--json"]) == 0
    [model] = last_json(capsys)["reward_models"]  # `rm list` reads the store only

    assert main(["rm", "show", model["id"], "--json"]) == 1
    shown = last_json(capsys)
    assert shown["status"] == "failed"
    assert f"process {command.pid}" in shown["error"] and "killed" in shown["error"]
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        info = instance.event_log_storage.get_concurrency_info("reward_worker")
        assert info.active_slot_count == 0 and info.pending_step_count == 0
        [run] = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.FAILURE
    # The killed attempt's job directory, which the run recorded, keeps only its log.
    job_dir = job_directory(home / "jobs", model["id"], attempt_name(1))
    assert job_dirs_of(run.tags) == [job_dir]
    assert [p.name for p in job_dir.iterdir()] == ["worker.log"]

    assert main(["rm", "retry", model["id"], "--wait", "--json"]) == 0
    retried = last_json(capsys)
    assert retried["status"] == "succeeded" and retried["attempt"] == 2, retried["error"]
