"""`stash-pipeline dev`: the Dagster UI and daemon on the instance the CLI uses."""

from __future__ import annotations

import argparse
import os
import sys


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "dev", help="open the Dagster UI (and run the sensors and schedules) on the local instance",
        description="Runs `dagster dev` on the instance the CLI records imports and runs in "
                    "(DAGSTER_HOME, else $STASH_HOME/dagster). Its daemon picks queued reward "
                    "models up.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3000)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from stash_pipeline.instance import dagster_home

    os.environ["DAGSTER_HOME"] = str(dagster_home())
    command = [sys.executable, "-m", "dagster", "dev", "-m", "stash_pipeline.definitions",
               "--host", args.host, "--port", str(args.port)]
    os.execvp(command[0], command)
    return 0  # not reached: exec replaces this process
