"""Runs whose launching process died: a `--wait` command killed mid-run leaves its run in
progress, its pool slots taken and its job directories full. Each in-process run carries the
process that executes it (``PROCESS_TAG``); a run whose process is gone is failed, its slots freed
and its job directories pruned to their logs."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from stash_pipeline.compute.contract import keep_only_logs
from stash_pipeline.compute.run import job_dirs_of

# The process that executes a run here (`host:pid:start`): a run whose process is gone, such as a
# `--wait` command killed with SIGKILL, is failed by fail_abandoned_runs and its pool slots freed.
PROCESS_TAG = "stash/process"
# NOT_STARTED too: a command killed between making its run and starting it leaves it so.
IN_PROGRESS = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def this_process() -> str:
    return process_tag(os.getpid())


def process_tag(pid: int) -> str:
    """``host:pid:start`` of a process of this host (``PROCESS_TAG``'s form)."""
    return f"{socket.gethostname()}:{pid}:{_process_start(pid) or ''}"


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), which a reused pid does not
    share; "Z" for a zombie, None where /proc cannot tell."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return "Z" if fields[0] in ("Z", "X") else fields[19]


def process_gone(tag: str) -> bool:
    """Whether the process a PROCESS_TAG names has ended; False for another host's process."""
    host, pid, start = tag.rsplit(":", 2)
    if host != socket.gethostname():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    now = _process_start(int(pid))
    return now == "Z" or bool(start and now and now != start)


def fail_abandoned_runs(instance: dg.DagsterInstance, runs: Sequence[dg.DagsterRun] | None,
                        record: Callable[[dg.DagsterRun, str], Any]) -> list[dg.DagsterRun]:
    """Runs in progress whose process here has died: failed with the reason, their pool slots
    freed, their job directories pruned (``prune_job_dirs``), and a personal model's attempt
    failed (its run-failure sensor does the same in a deployment). Returns the runs it failed."""
    if runs is None:
        runs = instance.get_runs(filters=dg.RunsFilter(statuses=IN_PROGRESS))
    failed = []
    for run in runs:
        tag = run.tags.get(PROCESS_TAG)
        if run.status not in IN_PROGRESS or not tag or not process_gone(tag):
            continue
        pid = tag.split(":")[-2]
        message = (f"the command that ran it (process {pid}) ended before the run did "
                   "(it was killed); retry it")
        instance.report_run_failed(run, message)
        if instance.event_log_storage.supports_global_concurrency_limits:
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        failed.append(run)
        record(run, message)
        prune_job_dirs(instance.get_run_by_id(run.run_id) or run)
    return failed


def prune_job_dirs(run: dg.DagsterRun) -> None:
    """A run that ended without its steps cleaning up (its process died, run monitoring failed it,
    it was cancelled): every job directory it used (``compute.run.JOB_DIRS_TAG``) keeps only its
    logs, as a finished attempt's does."""
    for job_dir in job_dirs_of(run.tags):
        keep_only_logs(job_dir)
