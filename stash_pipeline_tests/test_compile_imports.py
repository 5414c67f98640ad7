"""scripts/compile_imports.py: the modules it imports, and the bytecode it leaves."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compile_imports.py"
spec = importlib.util.spec_from_file_location("compile_imports", SCRIPT)
compile_imports = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compile_imports)


def test_every_module_of_the_package_by_its_files(tmp_path):
    package = tmp_path / "pkg"
    for name in ("__init__.py", "__main__.py", "a.py", "sub/__init__.py", "sub/b.py",
                 "sub/__main__.py", "store/migrations/env.py",
                 "store/migrations/versions/0001_first.py", "store/__init__.py"):
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("")
    assert compile_imports.package_modules(package) == [
        "pkg", "pkg.a", "pkg.store", "pkg.sub", "pkg.sub.b"]


def test_the_project_lists_its_modules_without_entry_points_or_migrations():
    names = compile_imports.package_modules(compile_imports.PACKAGE)
    assert "stash_pipeline.worker.runner" in names and "stash_pipeline.definitions" in names
    assert not any(name.endswith("__main__") or ".migrations" in name for name in names)


def test_both_processes_write_bytecode_where_the_environment_says_not_to(tmp_path, monkeypatch):
    package = tmp_path / "pkg"
    for name in ("__init__.py", "a.py", "worker/__init__.py", "worker/b.py"):
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("VALUE = 1\n")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert compile_imports.main(package, first=()) == 0
    assert {path.name.split(".")[0] for path in package.rglob("*.pyc")} == {"__init__", "a", "b"}
    assert len(list(package.rglob("*.pyc"))) == 4


def test_a_module_that_fails_to_import_fails_the_run(tmp_path, monkeypatch):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "broken.py").write_text("raise ImportError('a missing dependency')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert compile_imports.main(package, first=()) != 0
