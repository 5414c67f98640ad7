"""A worker killed in every phase, then retried in the same directory, succeeds; each killed
attempt's log keeps why it stopped (issue 12)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from stash_pipeline.compute.contract import JobSettings, read_metrics, write_job
from stash_pipeline.compute.worker_log import failure_reason
from stash_pipeline.worker.runner import main
from stash_pipeline_tests.support import pausing_worker
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, bound

pytestmark = pytest.mark.slow
KILLS = [("inputs", signal.SIGTERM), ("load", signal.SIGKILL),
         ("training", signal.SIGTERM), ("save", signal.SIGKILL), ("evaluation", signal.SIGTERM),
         ("archive", signal.SIGKILL), ("scoring", signal.SIGTERM)]


def killed_attempt(job_dir: Path, stop_at: str, kill: signal.Signals, scratch: Path) -> int:
    """The exit status of a worker process (pausing_worker.py) killed with ``kill`` at
    ``stop_at``: the signal's negative number, as subprocess reports it, or the exit code."""
    reached, output = scratch / f"reached-{stop_at}", scratch / f"output-{stop_at}"
    process = pausing_worker.start(job_dir, stop_at, reached, output)
    deadline = time.monotonic() + bound(PROCESS_EXIT_S)
    while not reached.exists():
        if not process.is_alive() or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"never reached {stop_at}: {output.read_text()[-2000:]}")
        time.sleep(0.05)
    os.kill(process.pid, kill)
    process.join(timeout=bound(PROCESS_EXIT_S))
    return process.exitcode


def test_killed_in_every_phase_then_retried_succeeds(tmp_path, tiny_base_model, synthetic_pairs):
    job_dir = tmp_path / "job"
    write_job(job_dir, JobSettings(evaluator="m", base_model=str(tiny_base_model)),
              train_pairs=synthetic_pairs(0, 6), eval_pairs=synthetic_pairs(100, 2),
              score_traces=[synthetic_pairs(200, 1)[0].chosen.trace])
    # Killed while the pairs file becomes a dataset: the retry finds no half-written dataset.
    assert killed_attempt(job_dir, "dataset", signal.SIGKILL, tmp_path) == -9
    assert [p.name.split("-")[0] for p in job_dir.iterdir() if ".partial" in p.name] == \
        ["train_pairs.partial"]
    assert not (job_dir / "train_pairs").exists()
    reasons = [failure_reason(job_dir, -9).splitlines()[-1]]
    assert main(str(job_dir)) == 0, failure_reason(job_dir)  # now a directory that succeeded before
    for stop_at, kill in KILLS:
        code = killed_attempt(job_dir, stop_at, kill, tmp_path)
        reason = failure_reason(job_dir, code)  # what the caller stores as the model's error
        where = stop_at
        if kill == signal.SIGKILL:
            assert code == -9
            assert reason.endswith("worker killed (signal 9)")
            assert reason.splitlines()[-2].endswith(f"interrupted in phase {where}")
        else:
            assert code == 1  # it logged why and exited through its failure path
            assert reason.endswith(f"job failed in phase {where}: WorkerStopped: stopped by signal "
                                   "15 (SIGTERM)")
        # Killed after an earlier success: nothing on disk looks like a success.
        assert not (job_dir / "metrics.json").exists()
        reasons.append(reason.splitlines()[-1])

    assert main(str(job_dir)) == 0, failure_reason(job_dir)
    metrics = read_metrics(job_dir)
    assert metrics["train_pairs"] == 6 and (job_dir / "reward-model.tar.gz").is_file()
    # One log per attempt: each killed one ends with its reason.
    logs = sorted((job_dir / "attempt-logs").iterdir())
    assert len(logs) == 2 + len(KILLS)
    last_lines = [log.read_text().rstrip().splitlines()[-1] for log in logs]
    assert last_lines[1].split(": ", 1)[1].startswith("metrics: ")  # the success in between
    assert last_lines[:1] + last_lines[2:] == reasons
    assert metrics["attempt"] in (job_dir / "worker.log").read_text().splitlines()[0]
    assert not [p.name for p in job_dir.iterdir() if ".partial" in p.name]
    assert json.loads((job_dir / "metrics.json").read_text()) == metrics
