"""What a run executed in this process (a ``--wait`` command) shows on the terminal.

Dagster's console logger prints every event of a run (130 lines for the main job); the run's event
log keeps them all for the UI, and worker.log keeps the worker's. A person at the command needs
less: each long phase of the worker (training, evaluation, scoring) as one progress bar on a
terminal, or one line when it ends in a log or a pipe; warnings and errors in one line each,
without stack traces (the model keeps the reason, the event log the whole error).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from stash_pipeline.compute.worker_log import job_progress, phase_mark

LONG_PHASES = ("training", "evaluation", "scoring")
_COUNTS = re.compile(r"(\d+)/(\d+) (\w+)")
_SCORED = re.compile(r"^scored (?P<what>\d+ [\w ]+)$")  # "scored 19 benchmark pairs"


class PhaseDisplay:
    """The worker's long phases from its progress lines: on a terminal a bar each, left on its
    own line when the phase ends; elsewhere one line at each phase's end."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.tty = stream.isatty()
        self.phase: str | None = None
        self.counts = ""  # the phase's latest counts: "9/9 steps, loss 0.6230", "38/38 pairs"
        self.bar: Any = None

    def worker_line(self, line: str) -> None:
        mark = phase_mark(line)
        if mark is not None:
            name, seconds = mark
            if seconds is None and name in LONG_PHASES:
                self._close()
                self.phase, self.counts = name, ""
            elif seconds is not None and name == self.phase:
                self._close(seconds)
            return
        if self.phase is None:
            return
        step = job_progress([line])
        if step.step is not None and step.total is not None:
            loss = "" if step.loss is None else f"loss {step.loss:.4f}"
            self._show(step.step, step.total, "steps", loss)
        elif line.startswith(f"{self.phase}: ") and (counts := _COUNTS.findall(line)):
            *others, (done, total, unit) = counts  # the bar counts the last unit
            self._show(int(done), int(total), unit,
                       ", ".join(f"{d}/{t} {u}" for d, t, u in others), before=True)
        elif not self.counts and (scored := _SCORED.match(line)):
            self.counts = scored["what"]  # a phase without counting lines (the benchmark's)

    def say(self, line: str) -> None:
        self._close()
        print(f"  {line}", file=self.stream, flush=True)

    def _show(self, done: int, total: int, unit: str, besides: str, *,
              before: bool = False) -> None:
        """The bar's count, ``besides`` it (a loss, the other units' counts) in the line."""
        count = f"{done}/{total} {unit}"
        self.counts = ", ".join(p for p in ((besides, count) if before else (count, besides)) if p)
        if not self.tty:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=self.phase, unit=f" {unit}", file=self.stream,
                            dynamic_ncols=True, leave=True)
        self.bar.total = total
        self.bar.update(done - self.bar.n)
        self.bar.set_postfix_str(besides)

    def _close(self, seconds: float | None = None) -> None:
        """End the phase's bar, or say what it did (a phase that did nothing says nothing)."""
        if self.bar is not None:
            self.bar.close()
        elif self.phase is not None and seconds is not None and self.counts:
            print(f"  {self.phase}: {self.counts} in {seconds:.1f} s", file=self.stream,
                  flush=True)
        self.bar, self.phase, self.counts = None, None, ""


class _CommandConsole(logging.Logger):
    """Dagster's console logger for runs executed here (Dagster makes it with the logging module's
    logger class at run start): the worker's lines go to ``display``; warnings, errors and failed
    steps are printed in one line each; every other event stays in the run's event log."""

    display: PhaseDisplay | None = None

    def handle(self, record: logging.LogRecord) -> None:
        display, meta = self.display, getattr(record, "dagster_meta", None)
        if display is None or meta is None:  # not a run's record, or past the command's block
            super().handle(record)
            return
        show(display, record.levelno,
             str(meta.get("orig_message") or record.getMessage()), meta.get("dagster_event"))


def show(display: PhaseDisplay, level: int, message: str, event: Any) -> None:
    """One log entry of a run as the command shows it: the worker's lines (``event`` None, below
    WARNING) to the display, warnings and errors and failed steps in one line each."""
    if event is None and level < logging.WARNING:
        display.worker_line(message)
    elif event is None and message.strip() and not message.startswith(SAID_BY_THE_FAILED_STEP):
        display.say(f"{logging.getLevelName(level).lower()}: {message.strip().splitlines()[0]}")
    elif event is not None and event.event_type_value in FAILURES:
        display.say(f"error: {failure_line(message, event)}")


class RunFollower:
    """A run another process executes (one a daemon launched), shown as one executed here: each
    ``show_new`` reads the entries its event log gained since the last."""

    def __init__(self, instance: Any, run_id: str, stream: TextIO | None = None):
        self.instance, self.run_id, self.cursor = instance, run_id, None
        self.display = PhaseDisplay(stream or sys.stderr)

    def show_new(self) -> None:
        while True:
            page = self.instance.get_records_for_run(self.run_id, cursor=self.cursor, limit=500)
            for record in page.records:
                entry = record.event_log_entry
                show(self.display, entry.level, entry.user_message or "", entry.dagster_event)
            self.cursor = page.cursor
            if not page.has_more:
                return

    def close(self) -> None:
        self.display._close()


# What a failed step's own line says better: Pipes' note that a worker sent nothing (the step's
# failure gives the reason), the steps after it not run, and the run's failure.
SAID_BY_THE_FAILED_STEP = ("[pipes] did not receive any messages", "Dependencies for step")
FAILURES = ("STEP_FAILURE",)


def failure_line(message: str, event: Any) -> str:
    """``Execution of step "x" failed: <the reason's first line>``."""
    data = event.event_specific_data
    described = getattr(getattr(data, "user_failure_data", None), "description", None)
    error = getattr(data, "error", None)
    reason = described or (error.message if error is not None else "")
    first = next((line.strip() for line in reason.splitlines() if line.strip()), "")
    return f"{message.rstrip('.')}: {first}" if first else message


@contextmanager
def command_console(stream: TextIO | None = None) -> Iterator[None]:
    """Runs executed in the block show as ``_CommandConsole`` says, on ``stream`` (stderr)."""
    previous = logging.getLoggerClass()
    _CommandConsole.display = PhaseDisplay(stream or sys.stderr)
    logging.setLoggerClass(_CommandConsole)
    try:
        yield
    finally:
        logging.setLoggerClass(previous)
        _CommandConsole.display._close()
        _CommandConsole.display = None
