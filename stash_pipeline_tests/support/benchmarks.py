"""A benchmark's module for a test that holds its figure (benchmarks/ is a folder of scripts, not a
package): loaded from its file, with the benchmark modules it imports by bare name loaded first.
Any other script a test imports (deploy/ecs/deploy.py) is loaded the same way."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def benchmark(name: str, *imports: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module; ``imports``: the sibling benchmark modules it imports
    by bare name (``from models import ...``), loaded the same way before it."""
    for each in (*imports, name):
        module_from_file(BENCHMARKS / f"{each}.py", each)
    return sys.modules[name]


def module_from_file(path: Path, name: str) -> ModuleType:
    """The script at ``path`` as module ``name`` (loaded once)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
