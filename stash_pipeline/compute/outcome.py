"""How a worker run ended, and why, in the words a failed model's ``error`` keeps."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stash_pipeline.compute.job import METRICS, failure_reason, read_metrics
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.training_settings import ERROR_TAIL_CHARS


@dataclass(frozen=True)
class WorkerExit:
    code: int  # the process's exit status; negative: killed by that signal
    timed_out: bool = False
    timeout_s: float | None = None
    messages: tuple[Any, ...] = ()  # Pipes custom messages ({"metrics": ...} on success)


class WorkerFailed(Exception):
    """The worker did not finish its job; ``reason`` is the model's error text."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def check_worker_exit(job_dir: Path, done: WorkerExit) -> None:
    """Raise WorkerFailed unless the worker exited 0 and wrote metrics.json (its success mark)."""
    if done.code == 0:
        try:
            read_metrics(job_dir)  # this attempt's success mark, never an earlier attempt's
            return
        except InputError:
            pass
    reason = failure_reason(job_dir, done.code)
    if done.timed_out:
        reason = f"{reason}\nworker stopped: it ran past its limit of {done.timeout_s:.0f} s"
    elif done.code == 0:
        reason = f"{reason}\nthe worker exited 0 without this attempt's {METRICS}"
    raise WorkerFailed(reason[-ERROR_TAIL_CHARS:])
