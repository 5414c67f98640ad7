"""``python -m stash_pipeline.run_forker``: the process each run's process is forked from.

A run's process (``python -m dagster api execute_run``, run_launcher.py) spends its first seconds
importing Dagster and the code location, opening the instance's storage and loading the
definitions (about 3 CPU-s here) before the run starts: seconds a person waits on every Score
again, and CPU every run pays again. The forker pays them once: its stdin brings first the
instance's serialized ref, with which it does that work (the instance opened and its storages
read, then closed; the definitions loaded), then a line per run with that run's ``execute_run``
arguments. For each it forks a child that runs exactly what ``dagster api execute_run`` runs,
its imports already done (this process's pages, shared until written), and writes the child's
pid as a line to the reply file descriptor it was given. The children are reaped here. A forker
whose stdin closes (the launcher let it go, or the launcher's process ended) exits; runs it
forked go on to their ends.

Forking is safe here because the forker starts no thread and holds no connection: only the
forking thread survives a fork, so a lock another thread held, or a socket a pool shared, would
be a child's to trip over.
"""

from __future__ import annotations

import json
import os
import signal
import sys


def warm(instance_ref: str) -> None:
    """What every run's process does before its run, done once before any run is known: a new
    instance from the same ref then reuses the imported storage modules and migration scripts."""
    import dagster as dg
    from dagster._serdes import deserialize_value

    from stash_pipeline import definitions

    with dg.DagsterInstance.from_ref(deserialize_value(instance_ref)) as instance:
        instance.get_run_by_id("0" * 36)  # the run and event storages opened and checked
        instance.event_log_storage.get_concurrency_keys()
    definitions.defs()


def reap(*_: object) -> None:
    """SIGCHLD: every child that ended, reaped (no zombie runs behind the forker)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def run_child(arguments: list[str], reply_fd: int) -> int:
    """In the forked child: the run, as ``dagster api execute_run`` with these arguments."""
    from dagster._cli import main as dagster_cli

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the run waits for its own children
    os.close(reply_fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # as a launched run: nothing on stdin, the forker's lines not shared
    os.close(devnull)
    sys.argv = ["dagster", *arguments]
    try:
        dagster_cli()  # exits with the run's status
    except SystemExit as end:
        return end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
    return 0


def main(reply_fd: int) -> int:
    reference = sys.stdin.readline()
    if not reference.strip():
        return 0
    warm(reference)
    signal.signal(signal.SIGCHLD, reap)
    reap()
    while line := sys.stdin.readline():
        if not line.strip():
            continue
        arguments = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return run_child(arguments, reply_fd)
        os.write(reply_fd, f"{pid}\n".encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
