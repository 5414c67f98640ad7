"""Per-step training progress: Dagster Pipes log events under Dagster, a tqdm bar on a terminal.

Every reporter also writes each step to the ``stash_pipeline.worker`` logger, which the job sends to
``worker.log``, so a failed job's log shows how far training got.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, Protocol

from stash_pipeline.compute.worker_log import step_line

logger = logging.getLogger("stash_pipeline.worker")
# dagster_pipes.DAGSTER_PIPES_CONTEXT_ENV_VAR (a test checks they agree), named here so that the
# worker imports dagster_pipes only when a Pipes launcher started it: a bare GPU host may lack it.
DAGSTER_PIPES_CONTEXT_ENV_VAR = "DAGSTER_PIPES_CONTEXT"


class Progress(Protocol):
    def info(self, message: str) -> None: ...

    def step(self, step: int, total: int, loss: float, pairs_per_second: float) -> None: ...

    def close(self) -> None: ...


class LogProgress:
    """Only the log: for runs that are neither under Dagster nor on a terminal."""

    def info(self, message: str) -> None:
        logger.info(message)

    def step(self, step: int, total: int, loss: float, pairs_per_second: float) -> None:
        logger.info(step_line(step, total, loss, pairs_per_second))

    def close(self) -> None:
        pass


class PipesProgress(LogProgress):
    """Log events in the Dagster run, through the Pipes context the launcher opened."""

    def __init__(self, pipes: Any):
        self.pipes = pipes

    def info(self, message: str) -> None:
        super().info(message)
        self.pipes.log.info(message)

    def step(self, step: int, total: int, loss: float, pairs_per_second: float) -> None:
        super().step(step, total, loss, pairs_per_second)
        self.pipes.log.info(step_line(step, total, loss, pairs_per_second))


class TqdmProgress(LogProgress):
    """A progress bar on the terminal, with loss and pairs/s as postfix."""

    def __init__(self) -> None:
        self.bar: Any = None

    def step(self, step: int, total: int, loss: float, pairs_per_second: float) -> None:
        super().step(step, total, loss, pairs_per_second)
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="step", desc="training")
        self.bar.update(step - self.bar.n)
        self.bar.set_postfix(loss=f"{loss:.4f}", pairs_s=f"{pairs_per_second:.2f}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def under_dagster_pipes() -> bool:
    """True when a Pipes launcher (PipesSubprocessClient, Modal) started this process."""
    return DAGSTER_PIPES_CONTEXT_ENV_VAR in os.environ


def default_progress(pipes: Any = None) -> Progress:
    if pipes is not None:
        return PipesProgress(pipes)
    if sys.stderr.isatty():
        return TqdmProgress()
    return LogProgress()


# How often a long phase (scoring, evaluation) reports how far it got: a line at most this long
# after the previous one, plus the forward that was running (a forward is a few seconds at most
# on a CPU), so lines are never more than about 10 s apart.
PROGRESS_INTERVAL_S = 5.0


class PhaseProgress:
    """Counts what a phase has done as its forwards finish and reports it, throttled:
    ``<phase>: 120/200 traces, 1500/2544 actions, 31.0 actions/s, about 34 s left``.

    ``totals`` names the units (traces, actions, pairs) and how many of each there are; a unit
    with none is left out (an actions-only run counts actions, not ``0/0 traces``). ``work`` is
    the phase's whole cost in tokens, which the time left is estimated from.
    """

    def __init__(self, report: Any, phase: str, totals: dict[str, int], *, work: int,
                 interval_s: float | None = None, clock: Any = time.monotonic):
        self.report, self.phase, self.totals, self.work = report, phase, totals, max(work, 1)
        self.done = {unit: 0 for unit in totals}
        self.worked = 0
        self.interval_s = PROGRESS_INTERVAL_S if interval_s is None else interval_s
        self.clock = clock
        self.started = self.last = clock()

    def add(self, tokens: int = 0, **units: int) -> None:
        for unit, count in units.items():
            self.done[unit] += count
        self.worked += tokens
        if self.clock() - self.last >= self.interval_s:
            self.emit()

    def line(self) -> str:
        elapsed = max(self.clock() - self.started, 1e-9)
        counted = {u: n for u, n in self.totals.items() if n} or self.totals
        counts = ", ".join(f"{self.done[u]}/{n} {u}" for u, n in counted.items())
        rate_unit = list(counted)[-1] if counted else "items"
        rate = self.done.get(rate_unit, 0) / elapsed
        left = self.seconds_left(elapsed)
        when = "time left unknown" if left is None else f"about {left:.0f} s left"
        return f"{self.phase}: {counts}, {rate:.1f} {rate_unit}/s, {when}"

    def seconds_left(self, elapsed: float) -> float | None:
        """The time left at the rate so far, never below zero: by tokens while the work done is
        under the estimate, else (the estimate was short: e.g. rows that could not share a
        prompt) by the share of units done; None before anything is done."""
        if self.worked and self.worked < self.work:
            return elapsed * (self.work - self.worked) / self.worked
        shares = [self.done[u] / n for u, n in self.totals.items() if n > 0]
        done = min(shares) if shares else None
        if not self.worked and not done:
            return None
        if done is None or done >= 1:
            return 0.0
        return elapsed * (1 - done) / done if done else None

    def emit(self) -> None:
        self.report(self.line())
        self.last = self.clock()
