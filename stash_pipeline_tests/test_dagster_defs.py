"""The code location loads, as `dg check defs` and `dg dev` need."""

import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg

from waiting import PROCESS_EXIT_S, bound

ROOT = Path(__file__).resolve().parents[1]


def test_definitions_load_and_validate():
    from stash_pipeline.definitions import defs

    dg.Definitions.validate_loadable(defs())


def test_dg_check_defs_passes():
    dg_cli = shutil.which("dg", path=str(Path(sys.executable).parent))
    assert dg_cli, "the dg CLI (dagster-dg-cli) is installed with the project"
    done = subprocess.run([dg_cli, "check", "defs"], cwd=ROOT, capture_output=True, text=True,
                          timeout=bound(PROCESS_EXIT_S))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All definitions loaded successfully" in done.stdout + done.stderr
