"""The worker refuses an unsupported torch or transformers in one line, before loading anything,
and the refusal is the model's stored error."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from stash_pipeline.cli import main
from stash_pipeline.services import accounts
from stash_pipeline.worker import stack
from stash_pipeline_tests.support.cli_helpers import cli_store, run_json  # noqa: F401 - a fixture
from stash_pipeline_tests.support.tiny_models import SHARED_DATA

REPO = Path(__file__).resolve().parents[2]


def test_the_installed_stack_is_supported_and_named():
    line = stack.check_stack()
    assert line.startswith("torch ") and ", transformers " in line


def test_an_older_transformers_is_refused_in_one_line_naming_versions_and_range(monkeypatch):
    versions = {"torch": "2.11.0+cu130", "transformers": "5.17.0"}
    monkeypatch.setattr(stack, "installed_version", versions.get)
    with pytest.raises(stack.UnsupportedStackError) as refused:
        stack.check_stack()
    message = str(refused.value)
    assert "\n" not in message
    # torch 2.11 with a CUDA label is in range (the GPU hosts' image); transformers is not.
    assert message == ("unsupported ML stack: torch 2.11.0+cu130, transformers 5.17.0 installed; "
                       f"the worker supports transformers {stack.SUPPORTED['transformers']}")
    monkeypatch.setattr(stack, "installed_version", {"transformers": "5.24.0"}.get)
    with pytest.raises(stack.UnsupportedStackError, match="torch missing, transformers 5.24.0"):
        stack.check_stack()


@pytest.mark.parametrize("name", ["torch", "transformers"])
def test_the_installation_pins_lie_inside_the_supported_ranges(name):
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    dependencies = [*project["dependencies"], *project["optional-dependencies"]["worker"]]
    assert any(line.startswith(f"{name}") for line in project["optional-dependencies"]["worker"])
    modal = (REPO / "deploy" / "requirements-worker.txt").read_text().splitlines()
    for line in [*dependencies, *modal]:
        requirement = Requirement(line) if line and not line.startswith("#") else None
        if requirement is None or requirement.name != name:
            continue
        # Every release the pin admits (lowest and highest patch of each admitted minor).
        lowest = min((spec.version for spec in requirement.specifier
                      if spec.operator in ("==", ">=")), key=Version)
        assert stack.supported(lowest, stack.SUPPORTED[name]), (line, stack.SUPPORTED[name])
        for spec in requirement.specifier:
            if spec.operator == "<":
                below = Version(spec.version)
                last_minor = f"{below.major}.{below.minor - 1}.99"
                assert stack.supported(last_minor, stack.SUPPORTED[name]), (line, last_minor)


def fake_distribution(directory: Path, name: str, version: str) -> Path:
    """A ``<name>-<version>.dist-info`` that importlib.metadata finds before the real one when
    ``directory`` comes first on the worker's path: an older package, as far as the check sees."""
    info = directory / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return directory


@pytest.mark.worker_process
def test_a_job_on_an_older_transformers_fails_the_model_with_the_one_line_reason(
        cli_store, tiny_base_model, tmp_path, monkeypatch, capsys):
    scratch = tmp_path / "scratch"
    monkeypatch.setenv("RM_ARTIFACT_DIR", str(scratch))
    monkeypatch.setenv("STASH_EXTRACTION", "off")
    older = fake_distribution(tmp_path / "older", "transformers", "5.17.0")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(older), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    account, _ = accounts.create(cli_store, "ana")
    sample = tmp_path / "hotpot.jsonl"
    hotpotqa = SHARED_DATA / "agentprocessbench" / "hotpotqa.jsonl"
    sample.write_text("".join(hotpotqa.open().readlines()[:6]))
    run_json(capsys, "import", str(sample), "--owner", account.id)

    code = main(["rm", "create", "--owner", account.id, "--name", "m", "--all-traces",
                 "--base-model", str(tiny_base_model), "--wait", "--json"])
    created = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1 and created["status"] == "failed", created
    expected = (f"job failed: UnsupportedStackError: unsupported ML stack: torch "
                f"{stack.installed_version('torch')}, transformers 5.17.0 installed; the worker "
                f"supports transformers {stack.SUPPORTED['transformers']}")
    # The stored reason ends with the refusal, and no traceback comes before it.
    assert created["error"].rstrip().endswith(expected), created["error"]
    assert "Traceback" not in created["error"]
    listed = run_json(capsys, "rm", "list", "--owner", account.id)["reward_models"][0]
    assert listed["status"] == "failed" and listed["error"] == created["error"]
    [log] = scratch.rglob("worker.log")
    assert "phase inputs" not in log.read_text()  # refused before anything was read or loaded
