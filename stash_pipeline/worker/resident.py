"""``python -m stash_pipeline.worker.resident SOCKET``: the worker kept running between jobs.

A new worker process spends seconds before its first forward (the interpreter, then torch,
transformers and datasets: about 6 CPU-s here) on jobs whose forwards take well under a second
(Score again of one trace). This process pays that once: it listens on a Unix socket, and a step
(``compute.resident``) hands it a scoring job directory with the step's Pipes parameters; it runs
the job with the very ``runner.main`` a new process runs (same files, same log, same Pipes events)
and answers the exit status. Each job is still a Dagster run's step and its record.

One job at a time: connections are taken one after another, so this process never runs two jobs,
and the ``reward_worker`` pool lets one step at a time hand it one. A step that goes away (its run
cancelled or killed) closes the connection, which stops the job through its failure path, as
SIGTERM stops a worker process. ``stash-pipeline dev`` starts it (docs/worker.md, "The resident
worker").
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from stash_pipeline.compute.contract import (
    ClosedBeforeMessage,
    read_resident_message,
    resident_message,
)
from stash_pipeline.worker.stop_signals import WorkerStopped, stop_signals_raise
from stash_pipeline.worker.threads import use_cpu_threads


def serve(path: Path, *, jobs: int | None = None) -> None:
    """Answer jobs on the socket at ``path`` until stopped (``jobs``: after that many, tests)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path.unlink(missing_ok=True)
    listener.bind(str(path))
    os.chmod(path, 0o600)  # only this account hands it jobs
    listener.listen(8)
    warm()
    print(f"resident worker {os.getpid()} ready on {path}", file=sys.stderr, flush=True)
    served = 0
    try:
        while jobs is None or served < jobs:
            connection, _ = listener.accept()
            with connection:
                serve_one(connection)
            served += 1
    finally:
        listener.close()
        path.unlink(missing_ok=True)


def warm() -> None:
    """What every job needs, loaded once: the threads (before torch), torch, transformers and
    the job modules."""
    from stash_pipeline.worker.runner import QUIET_LIBRARIES

    for name, value in QUIET_LIBRARIES.items():
        os.environ.setdefault(name, value)
    use_cpu_threads()
    import stash_pipeline.worker.procedures  # noqa: F401  (torch, transformers)


def serve_one(connection: socket.socket) -> None:
    """One job: ``{"job_dir", "env"}`` in; ``{"pid"}`` once taken, ``{"exit"}`` at its end."""
    from dagster_pipes import PipesContext

    from stash_pipeline.worker.runner import main

    try:
        request = read_resident_message(connection.makefile("rb"))
        job_dir, env = str(request["job_dir"]), dict(request.get("env") or {})
    except ClosedBeforeMessage:
        return  # a probe that only looked whether this worker answers
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"resident worker: a bad request ({error}); skipped", file=sys.stderr, flush=True)
        return
    try:
        connection.sendall(resident_message({"pid": os.getpid()}))
    except OSError:
        return  # the step went away before its job started
    done, deciding = threading.Event(), threading.Lock()
    threading.Thread(target=stop_when_closed, args=(connection, done, deciding),
                     daemon=True).start()
    with environment(env), stop_signals_raise():
        # open_dagster_pipes hands back the process's one context once it exists: each job
        # opens its own, as in a new process.
        PipesContext.set(None)  # type: ignore[arg-type]
        code = 1
        try:
            try:
                code = main(job_dir)
            except WorkerStopped:  # stopped before main's own handling began
                code = 1
            with deciding:  # from here the step's going away stops nothing
                done.set()
        except WorkerStopped:  # the step went away as the job ended: it reads no answer
            done.set()
    try:
        connection.sendall(resident_message({"exit": code}))
    except OSError:
        pass  # the step went away: the job was stopped


def stop_when_closed(connection: socket.socket, done: threading.Event,
                     deciding: threading.Lock) -> None:
    """SIGTERM to this process when the step closes its side during the job: ``runner.main``
    turns it into the job's failure (``stop_signals``), and serving goes on. Under ``deciding``,
    so that the signal never comes once the job is done."""
    try:
        while not done.is_set() and connection.recv(1):
            pass
    except OSError:
        pass
    with deciding:
        if not done.is_set():
            os.kill(os.getpid(), signal.SIGTERM)


@contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """The step's variables (its Pipes parameters) for one job, the previous ones after it."""
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def cli(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m stash_pipeline.worker.resident SOCKET", file=sys.stderr)
        return 2
    try:
        serve(Path(argv[0]))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
