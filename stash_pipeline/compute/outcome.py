"""How a worker run ended, and why, in the words a failed model's ``error`` keeps."""

from __future__ import annotations

import sys
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from stash_pipeline.compute.contract import METRICS, read_metrics
from stash_pipeline.compute.worker_log import failure_reason
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.training_settings import ERROR_TAIL_CHARS


@dataclass(frozen=True)
class WorkerExit:
    code: int  # the process's exit status; negative: killed by that signal
    timed_out: bool = False
    timeout_s: float | None = None
    messages: tuple[Any, ...] = ()  # Pipes custom messages ({"metrics": ...} on success)
    # The end of what the process wrote on stderr: the reason of a worker that stopped before it
    # opened worker.log (a job directory it cannot find, an interpreter without the project).
    stderr: str = ""


class StderrTail:
    """A worker process's stderr passed on to this process's stderr as it comes (the run's
    compute log, or the terminal of a ``--wait`` command), its last characters kept.

    ``start`` reads the pipe in a thread of its own, so a worker that writes much never blocks on
    a full pipe; ``text`` waits for the pipe's end (the worker's exit)."""

    def __init__(self, pipe: IO[bytes], forward: IO[str] | None = None):
        self._pipe = pipe
        self._forward = forward
        self._tail: deque[str] = deque()
        self._size = 0
        self._thread = threading.Thread(target=self._read, name="worker-stderr", daemon=True)

    def start(self) -> StderrTail:
        self._thread.start()
        return self

    def _read(self) -> None:
        for raw in iter(self._pipe.readline, b""):
            line = raw.decode(errors="replace")
            forward = self._forward or sys.stderr
            forward.write(line)
            forward.flush()
            self._tail.append(line)
            self._size += len(line)
            while self._size > ERROR_TAIL_CHARS and len(self._tail) > 1:
                self._size -= len(self._tail.popleft())
        self._pipe.close()

    def text(self, timeout_s: float = 10.0) -> str:
        self._thread.join(timeout_s)
        return "".join(self._tail)[-ERROR_TAIL_CHARS:]


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
    reason = failure_reason(job_dir, done.code, stderr=done.stderr)
    if done.timed_out:
        reason = f"{reason}\nworker stopped: it ran past its limit of {done.timeout_s:.0f} s"
    elif done.code == 0:
        reason = f"{reason}\nthe worker exited 0 without this attempt's {METRICS}"
    raise WorkerFailed(reason[-ERROR_TAIL_CHARS:])
