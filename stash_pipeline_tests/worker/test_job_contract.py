"""The torch-free job contract (clean attempts, atomic writes) and job log (phases, progress and
failure reasons)."""

from __future__ import annotations

import json

import pytest

from stash_pipeline.compute.contract import JobSettings, atomic_path, read_metrics, write_job
from stash_pipeline.compute.worker_log import (
    PHASES,
    JobProgress,
    append_log,
    failure_reason,
    job_progress,
    logged_phase,
    phase_seconds,
    retire_log,
    step_line,
    unfinished_phase,
)
from stash_pipeline.core.errors import InputError

LOG = """2026-11-30 10:00:00,000 INFO stash_pipeline.worker: attempt abc123 started (pid 7)
2026-11-30 10:00:00,000 INFO stash_pipeline.worker: phase inputs started
2026-11-30 10:00:01,000 INFO stash_pipeline.worker: phase inputs done in 1.25 s
2026-11-30 10:00:01,000 INFO stash_pipeline.worker: phase training started
2026-11-30 10:00:02,000 INFO stash_pipeline.worker: step 1/9 loss 0.6931 pairs/s 4.00
"""


def test_a_kill_the_worker_could_not_log_ends_the_reason_and_the_log(tmp_path):
    (tmp_path / "worker.log").write_text(LOG)
    reason = failure_reason(tmp_path, -9)
    assert reason.splitlines()[-1].endswith("worker killed (signal 9)")
    assert "interrupted in phase training" in reason.splitlines()[-2]
    # The attempt's own log keeps the reason (a retry moves it to attempt-logs/), once.
    log = (tmp_path / "worker.log").read_text()
    assert log.rstrip().endswith("worker killed (signal 9)")
    assert failure_reason(tmp_path, -9) == reason
    assert (tmp_path / "worker.log").read_text() == log


def test_an_exit_status_that_is_not_a_signal_adds_nothing(tmp_path):
    (tmp_path / "worker.log").write_text(LOG + "x" * 3000
                                         + "\njob failed in phase training: boom\n")
    for code in (None, 0, 1):
        reason = failure_reason(tmp_path, code)
        assert len(reason) == 2000 and reason.endswith("job failed in phase training: boom")
    assert failure_reason(tmp_path / "nowhere", -15) == (
        "the worker stopped before it wrote worker.log, and said nothing on stderr\n"
        "worker killed (signal 15)")
    assert failure_reason(tmp_path / "nowhere", 1, stderr="Traceback ...\nImportError: x\n") == (
        "the worker (exit status 1) stopped before it wrote worker.log; it said:\n"
        "Traceback ...\nImportError: x")


def test_phases_are_read_from_the_log(tmp_path):
    assert unfinished_phase(LOG) == "training"
    assert phase_seconds(LOG) == {"inputs": 1.25}
    (tmp_path / "worker.log").write_text(LOG)
    with logged_phase(tmp_path, "upload"):
        pass
    text = (tmp_path / "worker.log").read_text()
    assert set(phase_seconds(text)) == {"inputs", "upload"} and unfinished_phase(text) is None
    assert all(name in PHASES for name in ("extraction", "training", "archive", "upload"))


def test_write_job_starts_a_clean_attempt_where_one_succeeded_before(tmp_path):
    settings = write_job(tmp_path, JobSettings(evaluator="m", base_model="b"))
    for name in ("metrics.json", "scores.jsonl", "action_scores.jsonl", "reward-model.tar.gz",
                 "metrics.json.partial-12"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "reward-model").mkdir()
    (tmp_path / "train_pairs").mkdir()  # a dataset made from the earlier JSON Lines
    (tmp_path / "train_pairs.partial-99").mkdir()  # a dataset a killed worker left half-written
    (tmp_path / "worker.log").write_text(LOG)
    again = write_job(tmp_path, JobSettings(evaluator="m", base_model="b"))
    assert again.attempt != settings.attempt
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "attempt-logs", "benchmark_pairs.jsonl", "eval_pairs.jsonl", "score_traces.jsonl",
        "settings.json", "train_pairs.jsonl"]
    assert [p.name for p in (tmp_path / "attempt-logs").iterdir()] == ["001-abc123.log"]


def test_metrics_of_another_attempt_are_not_this_jobs_success(tmp_path):
    settings = write_job(tmp_path, JobSettings(evaluator="m", base_model="b"))
    with pytest.raises(InputError, match="did not succeed"):
        read_metrics(tmp_path)
    (tmp_path / "metrics.json").write_text(json.dumps({"attempt": "older"}))
    with pytest.raises(InputError, match="written by attempt 'older'"):
        read_metrics(tmp_path)
    (tmp_path / "metrics.json").write_text(json.dumps({"attempt": settings.attempt,
                                                       "train_pairs": 3}))
    assert read_metrics(tmp_path)["train_pairs"] == 3


def test_retired_logs_keep_their_order(tmp_path):
    assert retire_log(tmp_path) is None
    for attempt in ("aaa", "bbb"):
        (tmp_path / "worker.log").write_text(LOG.replace("abc123", attempt))
        retire_log(tmp_path)
    (tmp_path / "worker.log").write_text("no header\n")
    retire_log(tmp_path)
    assert sorted(p.name for p in (tmp_path / "attempt-logs").iterdir()) == [
        "001-aaa.log", "002-bbb.log", "003-unknown.log"]


def test_atomic_path_leaves_the_old_state_or_the_new_one(tmp_path):
    target = tmp_path / "dataset"
    with atomic_path(target) as partial:
        partial.mkdir()
        (partial / "rows").write_text("1")
    assert (target / "rows").read_text() == "1"
    with pytest.raises(RuntimeError), atomic_path(target) as partial:
        partial.mkdir()
        (partial / "rows").write_text("2")
        raise RuntimeError("killed while writing")
    assert (target / "rows").read_text() == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dataset"]
    with atomic_path(target) as partial:  # a directory replaced by a new one
        partial.mkdir()
        (partial / "other").write_text("3")
    assert sorted(p.name for p in target.iterdir()) == ["other"]


def test_progress_lines_read_back_into_phase_step_loss_and_rate():
    """Newest line first, as a run's log is read: the phase is the newest line's, the step the
    newest training step's."""
    scoring = "scoring: 40/200 traces, 500/2544 actions, 50.0 actions/s, about 41 s left"
    lines = [scoring, "phase scoring started", "checkpoint weights stored in bfloat16",
             step_line(9, 9, 0.41204, 2.5), step_line(8, 9, 0.5, 2.4), "phase training started"]
    assert job_progress(lines) == JobProgress(line=scoring, phase="scoring", step=9, total=9,
                                              loss=0.412, pairs_per_second=2.5)
    assert job_progress(lines[3:]) == JobProgress(line="step 9/9 loss 0.4120 pairs/s 2.50",
                                                  phase="training", step=9, total=9,
                                                  loss=0.412, pairs_per_second=2.5)
    assert job_progress(["phase load started", "phase inputs started"]) == JobProgress(
        line="phase load started", phase="load")
    # A loss that is not a number stays out of the JSON the viewer serves.
    assert job_progress([step_line(2, 9, float("nan"), 3.0)]).loss is None
    assert job_progress(["attempt abc started", "not progress"]) == JobProgress()


def test_caller_lines_use_the_worker_format(tmp_path):
    append_log(tmp_path, "phase upload started")
    assert unfinished_phase((tmp_path / "worker.log").read_text()) == "upload"


def test_the_worker_names_the_pipes_variable_as_dagster_pipes_does():
    from dagster_pipes import DAGSTER_PIPES_CONTEXT_ENV_VAR

    from stash_pipeline.worker import progress

    assert progress.DAGSTER_PIPES_CONTEXT_ENV_VAR == DAGSTER_PIPES_CONTEXT_ENV_VAR


def test_a_full_scratch_disk_is_one_clear_error_and_leaves_no_inputs(tmp_path, synthetic_pairs):
    """A job directory on a really full disk (full_disk.py): StorageFullError in one sentence that
    says where to free space, and none of the job's inputs half-written or left behind."""
    from stash_pipeline.core.errors import StorageFullError
    from stash_pipeline_tests.support.full_disk import contents, fill, small_disk

    with small_disk(tmp_path / "scratch", 1024) as disk:
        fill(disk, leave_kib=64)
        with pytest.raises(StorageFullError, match="RM_ARTIFACT_DIR") as caught:
            write_job(disk / "job", JobSettings(evaluator="m", base_model="b"),
                      train_pairs=synthetic_pairs(0, 400), eval_pairs=synthetic_pairs(500, 50))
        assert "\n" not in str(caught.value)
        assert [p for p in contents(disk) if (disk / p).is_file()] == []
