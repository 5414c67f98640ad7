"""`stash-pipeline` commands as processes of their own, started at once, forked from one process
that imported the command line once.

A racing test needs real processes (their own connections, locks and exit statuses), not their
second of imports each (Dagster, SQLAlchemy). The zygote, a fresh interpreter with no threads (so
forking it is safe), imports the CLI and every subcommand, then forks one child per command. Each
child takes its command's environment, working folder and output files, runs
`stash_pipeline.cli.main` as `python -m stash_pipeline` does, and exits with its status through
the interpreter's normal exit. The children start within milliseconds of each other, closer
together than processes that each import first. The zygote also imports what a command's first
Dagster instance imports, and reads the migration scripts a command reads once, by opening an
instance in a folder of its own (never a test's STASH_HOME). (Not multiprocessing's fork server:
a process has one, and ``worker/pausing_worker.py``'s preloads the worker's torch instead.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, bound

ZYGOTE = r"""
import gc, json, os, shutil, sys, threading
import dagster as dg
import sqlalchemy.dialects.postgresql.psycopg, sqlalchemy.dialects.sqlite.pysqlite
from stash_pipeline.cli import build_parser, main
import stash_pipeline.dagster_runs.in_process  # what a --wait command runs its sensors with
from stash_pipeline.dagster_runs.instance import LOCAL_CONFIG
from stash_pipeline.store.migration_scripts import share_revision_maps

build_parser()  # imports every subcommand's module
job = json.load(sys.stdin)
# What a command's first Dagster instance imports (its storages: 300 modules, half a second) and
# the migration scripts it reads, by opening one of the packaged configuration in a folder of the
# zygote's own.
share_revision_maps()
os.makedirs(job["preload"])
shutil.copyfile(LOCAL_CONFIG, os.path.join(job["preload"], "dagster.yaml"))
with dg.DagsterInstance.from_config(job["preload"]) as instance:
    instance.get_runs(limit=1)
    instance.all_instigator_state()
    instance.get_latest_materialization_event(dg.AssetKey("traces"))
assert threading.active_count() == 1, threading.enumerate()  # forking stays safe
# What a prefork server does: the garbage collector leaves the inherited objects alone, so a child
# neither scans them nor copies every page it touches (8 children: 11 s of CPU less).
gc.freeze()
commands = job["commands"]
children = []
for command in commands:
    pid = os.fork()
    if pid == 0:
        os.chdir(command["cwd"])
        os.environ.clear()
        os.environ.update(command["env"])
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                                (1, command["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, command["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            os.dup2(os.open(path, flags), fd)
        sys.exit(main(command["args"]))
    children.append(pid)
print(json.dumps([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]))
"""


@dataclass(frozen=True)
class Command:
    args: Sequence[str]
    env: Mapping[str, str]
    cwd: Path


@dataclass(frozen=True)
class Finished:
    code: int
    out: str
    err: str


def run_at_once(commands: Sequence[Command], scratch: Path) -> tuple[list[Finished], str]:
    """Each command's exit status and output, and what the zygote itself wrote to stderr while it
    imported (warnings at import time show there)."""
    scratch.mkdir(parents=True, exist_ok=True)
    specs = [{"args": list(c.args), "env": dict(c.env), "cwd": str(c.cwd),
              "stdout": str(scratch / f"{i}.out"), "stderr": str(scratch / f"{i}.err")}
             for i, c in enumerate(commands)]
    job = {"commands": specs, "preload": str(scratch / "preloaded-instance")}
    zygote = subprocess.run([sys.executable, "-c", ZYGOTE], input=json.dumps(job),
                            capture_output=True, text=True, timeout=bound(PROCESS_EXIT_S),
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert zygote.returncode == 0, zygote.stderr
    codes = json.loads(zygote.stdout.strip().splitlines()[-1])
    finished = [Finished(code, Path(s["stdout"]).read_text(), Path(s["stderr"]).read_text())
                for code, s in zip(codes, specs)]
    return finished, zygote.stderr
