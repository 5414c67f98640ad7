"""Stop signals: SIGTERM and SIGINT end a running job through its failure path, logged."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Signals a supervisor sends to stop a worker: the worker logs the reason, then exits 1.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class WorkerStopped(BaseException):
    """Raised in the main thread by a stop signal, so the job ends through its failure path."""

    def __init__(self, signal_number: int):
        self.signal_number = signal_number
        super().__init__(f"stopped by signal {signal_number} "
                         f"({signal.Signals(signal_number).name})")


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """While the job runs, SIGTERM and SIGINT raise ``WorkerStopped`` in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread (e.g. a test's worker thread)
        return

    def stop(signal_number: int, _frame: Any) -> None:
        raise WorkerStopped(signal_number)

    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
