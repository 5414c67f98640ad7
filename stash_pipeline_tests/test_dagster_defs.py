"""The code location loads, as `dg check defs` and `dg dev` need."""

import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg

from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, bound

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


def test_the_compute_settings_are_absolute_paths_read_against_the_working_directory(
        tmp_path, monkeypatch):
    """The worker starts in its job directory: every path the compute resource hands it is
    absolute, a relative setting read against the working directory of the process that reads
    it, a bare interpreter name left to PATH."""
    from stash_pipeline.defs.resources import ComputeResource, SharedEvaluatorResource

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STASH_HOME")
    monkeypatch.delenv("RM_ARTIFACT_DIR", raising=False)
    assert ComputeResource().scratch == tmp_path / ".stash" / "jobs"
    monkeypatch.setenv("RM_ARTIFACT_DIR", "scratch")
    monkeypatch.setenv("RM_WORKER_PYTHON", "venv/bin/python")
    assert ComputeResource().scratch == tmp_path / "scratch" and (tmp_path / "scratch").is_dir()
    assert ComputeResource().python == str(tmp_path / "venv" / "bin" / "python")
    monkeypatch.setenv("RM_WORKER_PYTHON", "python3")
    assert ComputeResource().python == "python3"
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    monkeypatch.setenv("STASH_SHARED_BASE_MODEL", "models/tiny")
    assert SharedEvaluatorResource().default_base_model() == str(tmp_path / "models" / "tiny")
    monkeypatch.setenv("STASH_SHARED_BASE_MODEL", "Qwen/Qwen3-0.6B")
    assert SharedEvaluatorResource().default_base_model() == "Qwen/Qwen3-0.6B"
