"""The scoring engine with a hold: while a test holds it, its scoring thread takes no batch.

A batch is whatever is queued when the scoring thread takes it, after its gathering time
(``Engine.gather_s``). A test that asserted requests sent "at once" land in one batch raced that
time against its own threads' starts, which a busy machine loses. Held, the engine waits instead
for the test: the test queues its requests, sees them queued (an event), and lets go; the batch
is then everything queued. Everything else is the real engine.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from stash_pipeline.worker.serving import Engine


class HeldEngine(Engine):
    def __init__(self, **options: Any):
        self._free = threading.Event()
        self._free.set()
        super().__init__(**options)

    @contextmanager
    def held(self) -> Iterator[None]:
        """No batch is taken inside this block; on leaving it, the queue is read as usual."""
        self._free.clear()
        try:
            yield
        finally:
            self._free.set()

    def queued(self) -> int:
        """Requests waiting to be read."""
        with self._changed:
            return len(self._queue)

    def close(self) -> None:
        self._free.set()
        super().close()

    def _take_batch(self):
        self._free.wait()
        return super()._take_batch()
