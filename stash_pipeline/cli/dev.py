"""`stash-pipeline dev`: the Dagster UI and daemon on the instance the CLI uses."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "dev", help="open the Dagster UI (and run the sensors and schedules) on the local instance",
        description="Runs `dg dev` on the project's workspace.yaml (which names the code "
                    "location) on the instance the CLI records imports and runs in "
                    "(DAGSTER_HOME, else $STASH_HOME/dagster). Its daemon picks queued reward "
                    "models up.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3000)
    parser.set_defaults(handler=run)


def dev_command(host: str, port: int, root: Path = PROJECT_ROOT) -> list[str]:
    """`dg dev` on the checkout's workspace.yaml, which names the code location once; an
    installed package without the checkout gets `dagster dev` on the module.

    A workspace, not `--target-path`: dg runs a project target from the project's folder, where
    the checkout's dagster.yaml (for a bare `dg dev`) makes Dagster warn that it is not the
    instance's; with a workspace it stays in the instance folder, whose dagster.yaml is in use."""
    workspace = root / "workspace.yaml"
    if workspace.is_file():
        dg = shutil.which("dg", path=str(Path(sys.executable).parent)) or shutil.which("dg")
        if dg:
            return [dg, "dev", "--workspace", str(workspace), "--host", host, "--port", str(port)]
    return [sys.executable, "-m", "dagster", "dev", "-m", "stash_pipeline.definitions",
            "--host", host, "--port", str(port)]


def run(args: argparse.Namespace) -> int:
    from stash_pipeline.core.home import stash_home
    from stash_pipeline.instance import dagster_home

    # Absolute, so every process reads the same store whatever its working directory.
    os.environ["STASH_HOME"] = str(stash_home(os.environ))
    home = dagster_home()
    os.environ["DAGSTER_HOME"] = str(home)
    if sys.prefix != sys.base_prefix:  # this interpreter's virtualenv is the active one
        os.environ.setdefault("VIRTUAL_ENV", sys.prefix)
    # In the instance folder: its dagster.yaml is the one in use, so Dagster does not warn about
    # the checkout's (for a bare `dg dev` there) being ignored.
    if home.is_dir():
        os.chdir(home)
    command = dev_command(args.host, args.port)
    os.execvp(command[0], command)
    return 0  # not reached: exec replaces this process
