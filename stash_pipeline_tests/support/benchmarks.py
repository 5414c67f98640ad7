"""A benchmark's module for a test that holds its figure (benchmarks/ is a folder of scripts, not a
package): loaded from its file, with the benchmark modules it imports by bare name loaded first."""

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
        if each not in sys.modules:
            spec = importlib.util.spec_from_file_location(each, BENCHMARKS / f"{each}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[each] = module
            spec.loader.exec_module(module)
    return sys.modules[name]
