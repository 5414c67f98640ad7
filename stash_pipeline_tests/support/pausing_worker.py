"""The real worker in a process of its own, paused where a test wants to kill it.

It pauses at the start of a phase, or right after a dataset was written but before it was renamed
into place (``dataset``). The pause is a sleep, so a SIGTERM arrives while the worker is inside
that phase.

Each attempt is a child of a multiprocessing fork server that imported the worker once: its kill,
its signal handling and its exit status are a process's own, without paying the worker's five
seconds of imports (torch, transformers, datasets) per attempt.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

WORKER_MODULES = ["stash_pipeline.worker.runner", "stash_pipeline.worker.procedures",
                  "stash_pipeline.worker.inputs"]


def start(job_dir: Path, stop_at: str, reached: Path, output: Path) -> multiprocessing.Process:
    """A started process running the worker on ``job_dir`` that writes ``reached`` when it
    pauses at ``stop_at``; its stdout and stderr go to ``output``."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(WORKER_MODULES)
    process = context.Process(target=_run, args=(str(job_dir), stop_at, str(reached),
                                                 str(output)))
    process.start()
    return process


def _run(job_dir: str, stop_at: str, reached: str, output: str) -> None:
    from datasets import Dataset  # the class the worker's inputs save pairs with

    from stash_pipeline.worker import runner

    descriptor = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(descriptor, 1)
    os.dup2(descriptor, 2)

    def pause() -> None:
        Path(reached).write_text(stop_at)
        while True:
            time.sleep(0.05)

    phase = runner.Phases.__call__

    @contextmanager
    def pausing_phase(self, name):
        with phase(self, name):
            if name == stop_at:
                pause()
            yield

    save_to_disk = Dataset.save_to_disk

    def pausing_save(self, path, *args, **kwargs):
        save_to_disk(self, path, *args, **kwargs)
        if stop_at == "dataset":
            pause()

    runner.Phases.__call__ = pausing_phase
    Dataset.save_to_disk = pausing_save
    sys.exit(runner.main(job_dir))
