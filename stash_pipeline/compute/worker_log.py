"""The job log: ``worker.log`` in a job directory, what the worker and its caller write there and
what is read back from it (``compute.contract`` is the rest of the job directory's contract).

The worker logs every phase with its duration, its training steps and its scoring counts, and ends
the log with the reason when the job fails; the caller logs the phases it runs itself (extraction,
upload) in the same format. Read back, the log tells how far a job got (``job_progress``), how long
each phase took (``phase_seconds``) and, for a failed model, its reason (``failure_reason``). An
earlier attempt's log moves to ``attempt-logs/`` (``retire_log``). Torch-free and Dagster-free: the
worker and the pipeline import it alike.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stash_pipeline.core.failures import hide_server_paths
from stash_pipeline.core.training_settings import ERROR_TAIL_CHARS

LOG = "worker.log"
ATTEMPT_LOGS = "attempt-logs"  # worker.log of every earlier attempt in this directory

# The phases of a job, in order, as worker.log names them. The caller logs the ones it runs
# (extraction before the job, upload after it) into the same log with ``logged_phase``.
PHASES = ("extraction", "settings", "inputs", "load", "untrained", "training", "evaluation",
          "save", "archive", "scoring", "upload")
_PHASE_LINE = re.compile(r"phase (?P<name>\w+) (?:(?P<started>started)|done in "
                         r"(?P<seconds>[0-9.]+) s)")


def retire_log(job_dir: Path) -> Path | None:
    """Move worker.log of an earlier attempt into ``attempt-logs/``; its new path, if any."""
    log = job_dir / LOG
    if not log.is_file():
        return None
    first = log.read_text(errors="replace").partition("\n")[0]
    found = re.search(r"attempt (\w+) started", first)
    folder = job_dir / ATTEMPT_LOGS
    folder.mkdir(exist_ok=True)
    number = len(list(folder.glob("*.log"))) + 1
    target = folder / f"{number:03d}-{found.group(1) if found else 'unknown'}.log"
    os.replace(log, target)
    return target


def phase_started_line(name: str) -> str:
    return f"phase {name} started"


def phase_done_line(name: str, seconds: float) -> str:
    return f"phase {name} done in {seconds:.2f} s"


def step_line(step: int, total: int, loss: float, pairs_per_second: float) -> str:
    """A training step as the worker reports it (worker.progress), read back by job_progress."""
    return f"step {step}/{total} loss {loss:.4f} pairs/s {pairs_per_second:.2f}"


# The worker's lines that say how far a job got: training steps, phase starts, and the scoring and
# evaluation phases' counts (worker.progress.PhaseProgress). `rm show` shows the latest one.
PROGRESS_LINE = re.compile(r"^(step \d+/\d+ |phase \w+ started|(scoring|evaluation): \d+/)")
_STEP = re.compile(r"^step (?P<step>\d+)/(?P<total>\d+) loss (?P<loss>\S+) pairs/s (?P<rate>\S+)")
_PHASE = re.compile(r"^(?:phase (?P<started>\w+) started|(?P<counting>scoring|evaluation): \d+/)")


def is_progress_line(message: str) -> bool:
    return bool(PROGRESS_LINE.match(message))


@dataclass(frozen=True)
class JobProgress:
    """How far a worker got, from its progress lines: the newest line, the phase it is in, and
    its newest training step (step of total, the step's loss, pairs per second)."""
    line: str | None = None
    phase: str | None = None
    step: int | None = None
    total: int | None = None
    loss: float | None = None
    pairs_per_second: float | None = None


def job_progress(lines_newest_first: Iterable[str]) -> JobProgress:
    """The progress the lines tell (any others among them are skipped); a loss or rate that is
    not a finite number is None."""
    line = phase = None
    step: dict[str, Any] = {}
    for message in lines_newest_first:
        if not is_progress_line(message):
            continue
        line = line or message
        found = _STEP.match(message)
        if found and not step:
            step = {"step": int(found["step"]), "total": int(found["total"]),
                    "loss": _finite(found["loss"]), "pairs_per_second": _finite(found["rate"])}
        if phase is None:  # a progress line that names no phase is a training step's
            named = _PHASE.match(message)
            phase = (named["started"] or named["counting"]) if named else "training"
        if step and phase:
            break
    return JobProgress(line=line, phase=phase, **step)


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def phase_seconds(log_text: str) -> dict[str, float]:
    """Seconds of every finished phase in a worker.log, in log order (a repeated phase adds up)."""
    seconds: dict[str, float] = {}
    for match in _PHASE_LINE.finditer(log_text):
        if match["seconds"] is not None:
            seconds[match["name"]] = seconds.get(match["name"], 0.0) + float(match["seconds"])
    return seconds


def phase_mark(line: str) -> tuple[str, float | None] | None:
    """A phase's start (its name, None) or end (its name and seconds) in one log line."""
    found = _PHASE_LINE.match(line)
    if found is None:
        return None
    return found["name"], None if found["started"] else float(found["seconds"])


def unfinished_phase(log_text: str) -> str | None:
    """The phase a log started last and never finished: where a killed worker was."""
    current = None
    for match in _PHASE_LINE.finditer(log_text):
        current = match["name"] if match["started"] else None
    return current


def append_log(job_dir: Path, message: str, level: str = "INFO") -> None:
    """A line in worker.log from the caller, in the worker's own format."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with (job_dir / LOG).open("a") as log:
        log.write(f"{stamp},000 {level} stash_pipeline.compute: {message}\n")


@contextmanager
def logged_phase(job_dir: Path, name: str) -> Iterator[None]:
    """A phase the caller runs (extraction, upload) in worker.log, with its duration."""
    append_log(job_dir, phase_started_line(name))
    started = time.perf_counter()
    yield
    append_log(job_dir, phase_done_line(name, time.perf_counter() - started))


def killed_by_signal(exit_code: int | None) -> int | None:
    """The signal that killed the worker: a negative exit status, as ``subprocess`` reports it."""
    return -exit_code if exit_code is not None and exit_code < 0 else None


def failure_reason(job_dir: Path, exit_code: int | None = None, *, stderr: str = "") -> str:
    """What a failed model's ``error`` holds: the last 2000 characters of worker.log with every
    absolute server path cut to its last part (``hide_server_paths``: the log on disk keeps them
    for the operator). The paths are cut before the tail is taken, so the reason keeps 2000
    characters of the log's words, and never begins inside a path.

    A worker killed by a signal it cannot catch (``kill -9``, the kernel's OOM killer) cannot log
    why: for a negative ``exit_code`` the reason ends with the phase it was in and
    ``worker killed (signal N)``, and those lines are added to worker.log as well, so the log of
    that attempt keeps them when a retry moves it to ``attempt-logs/``.

    A worker that stopped before it opened worker.log (it could not find its job directory or
    import the project) said why on stderr: the reason is then its exit status and ``stderr``'s
    end, whose last line is the error.
    """
    path = job_dir / LOG
    text = (path.read_text(errors="replace") if path.is_file()
            else never_started(exit_code, stderr))
    signal_number = killed_by_signal(exit_code)
    if signal_number is not None:
        phase = unfinished_phase(text)
        lines = (([f"interrupted in phase {phase}"] if phase else [])
                 + [f"worker killed (signal {signal_number})"])
        if text.rstrip().endswith(lines[-1]):
            pass  # recorded by an earlier call
        elif path.is_file():
            for line in lines:
                append_log(job_dir, line, "ERROR")
            text = path.read_text(errors="replace")
        else:
            text = text.rstrip() + "\n" + "\n".join(lines)
    return hide_server_paths(text.rstrip())[-ERROR_TAIL_CHARS:]


def never_started(exit_code: int | None, stderr: str) -> str:
    """Why a worker that wrote no worker.log failed: its exit status, then what it said."""
    # A signal is said on the line after this one (failure_reason).
    status = "" if exit_code is None or exit_code < 0 else f" (exit status {exit_code})"
    said = stderr.strip()
    return (f"the worker{status} stopped before it wrote {LOG}"
            + (f"; it said:\n{said}\n" if said else ", and said nothing on stderr\n"))
