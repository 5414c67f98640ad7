"""House rules from DESIGN §2 that a test can hold: light entry points, arrows pointing down."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "stash_pipeline"
HEAVY = ("torch", "transformers", "datasets")


def test_entry_points_never_import_torch():
    """The CLI, the Dagster definitions and the HTTP API (its app and every route) load no torch."""
    code = (
        "import sys\n"
        "import stash_pipeline.definitions, stash_pipeline.cli, stash_pipeline.store\n"
        "from stash_pipeline.cli import build_parser; build_parser()\n"
        "from stash_pipeline.api import create_app; create_app().openapi()\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_only_the_worker_imports_the_ml_stack():
    offenders = [
        str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
        if "worker" not in path.relative_to(PACKAGE).parts
        and any(name.split(".")[0] in HEAVY for name in imports_of(path))
    ]
    assert offenders == []


def test_core_imports_nothing_of_the_project_but_core():
    offenders = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in (PACKAGE / "core").rglob("*.py")
        for name in imports_of(path)
        if name.startswith("stash_pipeline") and not name.startswith("stash_pipeline.core")
    ]
    assert offenders == []


def test_the_worker_imports_only_core_and_the_job_contract():
    """The worker runs in its own process (locally or on Modal): no store, Dagster or extraction."""
    offenders = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in (PACKAGE / "worker").rglob("*.py")
        for name in imports_of(path)
        if name.startswith("stash_pipeline")
        and not name.startswith(("stash_pipeline.core", "stash_pipeline.worker",
                                 "stash_pipeline.compute.job"))
        and name != "stash_pipeline.compute"
    ]
    assert offenders == []
