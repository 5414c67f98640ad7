"""Running one job directory: train and/or score, write the outputs, log to worker.log.

``python -m stash_pipeline.worker JOB_DIR`` calls ``main``; a Modal function calls the same.
Every attempt starts clean (an earlier attempt's outputs removed, its log kept in attempt-logs/),
logs each phase with its duration, and on SIGTERM logs why it stops before it exits. This module
only conducts an attempt: it checks the ML stack (``stack.check_stack``) first, then reads the
settings; the training and scoring jobs are ``procedures``'s, imported once both passed (this module
imports no torch); the stop signals are handled by ``stop_signals``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from stash_pipeline.compute import contract, worker_log
from stash_pipeline.worker.outputs import write_metrics
from stash_pipeline.worker.progress import Progress, default_progress, logger, under_dagster_pipes
from stash_pipeline.worker.stack import UnsupportedStackError, check_stack
from stash_pipeline.worker.stop_signals import stop_signals_raise
from stash_pipeline.worker.threads import use_cpu_threads


class Phases:
    """Logs each phase's start and its duration, and knows which phase is running."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.current: str | None = None
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.current = name
        self.progress.info(worker_log.phase_started_line(name))
        started = time.perf_counter()
        yield
        seconds = time.perf_counter() - started
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.progress.info(worker_log.phase_done_line(name, seconds))
        self.current = None


def train_or_score(job_dir: Path, progress: Progress | None = None, phase: Phases | None = None,
                   attempt: str | None = None) -> dict[str, Any]:
    """Train or score as the settings of the job in ``job_dir`` say and write its outputs;
    metrics.json last, as the success mark. (``compute.run.run_job`` is the caller's side of a
    job: write, run, read and prune.)"""
    started = time.perf_counter()
    progress = progress or default_progress()
    phase = phase or Phases(progress)
    contract.clear_outputs(job_dir)  # an earlier attempt's success must not look like this one's
    # Before anything loads torch or transformers: an unsupported stack fails here in one line.
    versions = check_stack()
    settings = contract.read_settings(job_dir)
    attempt = settings.attempt or attempt or contract.new_attempt_id()
    # The ML libraries load only for settings that passed: a bad job fails in a fraction of a
    # second. Threads first: OpenMP reads its wait policy once, when torch loads it.
    threads = use_cpu_threads()
    from stash_pipeline.worker import procedures

    progress.info(versions)
    progress.info(threads.describe())
    run = procedures.train_job if settings.is_training else procedures.score_job
    metrics = run(job_dir, settings, progress, phase)
    metrics.update(seconds=time.perf_counter() - started, attempt=attempt,
                   phases=dict(phase.seconds))
    write_metrics(job_dir, metrics)
    progress.info(f"metrics: {json.dumps(metrics)}")
    return metrics


# The worker reports its own progress, phase by phase (worker.log, Pipes log events): the bars of
# transformers and datasets on stderr would only glue lines into the caller's terminal and the
# run's logs. Set before they are imported; a value already set is kept.
QUIET_LIBRARIES = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}


def main(job_dir: str) -> int:
    """Run a job with logging to worker.log; on failure the log ends with the reason, exit status
    1."""
    for name, value in QUIET_LIBRARIES.items():
        os.environ.setdefault(name, value)
    path = Path(job_dir)
    if not path.is_dir():
        print(f"job directory {job_dir} does not exist", file=sys.stderr)
        return 2
    worker_log.retire_log(path)
    attempt = contract.attempt_of(path)
    handler = logging.FileHandler(path / worker_log.LOG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.info(f"attempt {attempt} started (pid {os.getpid()})")
    with ExitStack() as stack:
        pipes = None
        progress: Progress | None = None
        phase: Phases | None = None
        try:
            stack.enter_context(stop_signals_raise())
            if under_dagster_pipes():
                from dagster_pipes import open_dagster_pipes

                pipes = stack.enter_context(open_dagster_pipes(
                    message_writer=contract.pipes_message_writer()))
            progress = default_progress(pipes)
            phase = Phases(progress)
            metrics = train_or_score(path, progress, phase, attempt)
            if pipes is not None:
                pipes.report_custom_message({"metrics": metrics})
            return 0
        except BaseException as error:  # noqa: BLE001 - any failure must end the log with its reason
            where = f" in phase {phase.current}" if phase is not None and phase.current else ""
            # The last line names what failed (the phase, the file or model path) and why: the
            # seed's `error` is the log's tail.
            if isinstance(error, UnsupportedStackError):  # a refusal, not a bug: one line
                logger.error("job failed: %s: %s", type(error).__name__, error)
            else:
                logger.error("job failed%s\n%s\njob failed%s: %s: %s", where,
                             traceback.format_exc().rstrip(), where, type(error).__name__, error)
            if pipes is not None:
                pipes.log.error(f"job failed{where}: {type(error).__name__}: {error}")
            return 1
        finally:
            if progress is not None:
                progress.close()
            handler.close()
            root.removeHandler(handler)
