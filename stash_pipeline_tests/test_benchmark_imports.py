"""The benchmarks import what the package has: a module renamed or a name moved breaks a
benchmark only where this test says so, not when someone next measures."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))


def imported_names(path: Path) -> list[tuple[str, str]]:
    """Every ``from stash_pipeline... import name`` in the file, at any depth (functions too)."""
    return [(node.module, alias.name) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                ("stash_pipeline.", "stash_pipeline_tests."))
            for alias in node.names]


def resolves(module: str, name: str) -> bool:
    found = importlib.import_module(module)
    if hasattr(found, name):
        return True
    try:
        importlib.import_module(f"{module}.{name}")
    except ModuleNotFoundError:
        return False
    return True


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_every_name_a_benchmark_imports_exists(path):
    missing = [f"{module}.{name}" for module, name in imported_names(path)
               if not resolves(module, name)]
    assert not missing, f"{path.name} imports what the package no longer has: {missing}"


def test_the_check_sees_a_missing_name(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def f():\n    from stash_pipeline.compute.job import ARCHIVE_NAME\n")
    with pytest.raises(ModuleNotFoundError):
        [resolves(m, n) for m, n in imported_names(broken)]
    moved = tmp_path / "moved.py"
    moved.write_text("from stash_pipeline.compute.contract import NO_SUCH_NAME\n")
    assert [resolves(m, n) for m, n in imported_names(moved)] == [False]
