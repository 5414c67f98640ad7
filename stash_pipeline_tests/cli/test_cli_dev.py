"""`stash-pipeline dev` runs `dg dev` in the project, whose pyproject names the code location."""

from __future__ import annotations

from pathlib import Path

from stash_pipeline.cli.dev import PROJECT_ROOT, dev_command


def test_a_checkout_runs_dg_dev_in_the_project():
    command = dev_command("127.0.0.1", 3001)
    assert Path(command[0]).name == "dg" and Path(command[0]).is_file()
    assert command[1:] == ["dev", "--target-path", str(PROJECT_ROOT), "--host", "127.0.0.1",
                           "--port", "3001"]
    pyproject = (PROJECT_ROOT / "pyproject.toml").read_text()
    assert 'code_location_name = "stash_pipeline"' in pyproject


def test_an_installed_package_without_the_project_runs_dagster_dev(tmp_path):
    command = dev_command("0.0.0.0", 3000, root=tmp_path)
    assert command[1:5] == ["-m", "dagster", "dev", "-m"] and command[-2:] == ["--port", "3000"]
