"""Compile the bytecode of what the project imports, by importing every module of the package.

scripts/venv.sh runs this after installing instead of having uv compile every file it installs:
the environment holds about 22,000 modules (anthropic's types, every model of transformers, ...)
and the project imports 7,000 of them, so compiling all costs about 26 s on two cores, importing
them 9 s. Python compiles anything else on its first import and keeps it (test-only packages, for
one), as it does for any package installed without bytecode.

Two processes import side by side, the worker's modules (torch, transformers) in one and the rest
in the other, which starts with the worker's third heavy import (datasets) to even them out. The
bytecode is written even where PYTHONDONTWRITEBYTECODE is set: a command run with it set then
reads what is compiled here rather than compiling its imports again at every start.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "stash_pipeline"
# Imports every module named on its command line; a module that fails to import fails the install.
IMPORTER = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)"


def package_modules(package: Path) -> list[str]:
    """Every importable module of ``package``, by its files: importing to find them would compile
    serially what the two processes are for. Entry points (``__main__``) and Alembic's migration
    scripts, which are not modules of the package, are left out."""
    names = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__main__" or "migrations" in parts:
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def main(package: Path = PACKAGE, first: tuple[str, ...] = ("datasets",)) -> int:
    """Imports ``package`` in two processes, its ``worker`` subpackage in one and ``first`` then
    the rest in the other; the status is the first failure's (a signal's is negative), else 0."""
    modules = package_modules(package)
    worker_package = f"{package.name}.worker"
    worker = [name for name in modules
              if name == worker_package or name.startswith(f"{worker_package}.")]
    rest = [*first, *(name for name in modules if name not in worker)]
    environment = {key: value for key, value in os.environ.items()
                   if key != "PYTHONDONTWRITEBYTECODE"}
    importers = [subprocess.Popen([sys.executable, "-c", IMPORTER, *names], env=environment)
                 for names in (worker, rest)]
    statuses = [importer.wait() for importer in importers]
    return next((status for status in statuses if status), 0)


if __name__ == "__main__":
    sys.exit(main())
