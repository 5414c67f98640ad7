"""Bounds for tests that wait for something to happen: a server to start, a worker to reach a phase,
a process to exit.

Tests wait on a condition, never on a fixed sleep, so an idle machine pays only what the work takes.
Each bound below is an upper limit, generous for a 2-core machine running eight other CPU-bound
processes beside the suite (the load `docs/testing.md` describes). `STASH_TEST_TIME_SCALE`
multiplies every bound for a machine slower still (default 1).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

SCALE = float(os.environ.get("STASH_TEST_TIME_SCALE", "1") or "1")

# A server (uvicorn, the fake Messages API) accepting connections.
SERVER_START_S = 120.0
# A child process (the worker, the CLI) finishing work that takes seconds on an idle machine.
PROCESS_EXIT_S = 600.0
# One HTTP request a test server answers.
REQUEST_S = 120.0
# A timeout of the product's that a test does not exercise (a statement timeout, a server's header
# timeout, the API's wait for the scoring server): set so load never reaches it, yet below
# REQUEST_S, so the product still answers before the test's client gives up. A test that exercises
# a timeout sets that one short and leaves every other at this.
PATIENT_S = 60.0


def bound(seconds: float) -> float:
    """``seconds`` scaled for this machine."""
    return seconds * SCALE


def wait_until(condition: Callable[[], bool], *, timeout_s: float, what: str,
               interval_s: float = 0.02) -> None:
    """Poll ``condition`` until it holds; past the scaled bound, fail naming ``what`` was
    awaited."""
    deadline = time.monotonic() + bound(timeout_s)
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {bound(timeout_s):.0f} s waiting for {what}")
        time.sleep(interval_s)
