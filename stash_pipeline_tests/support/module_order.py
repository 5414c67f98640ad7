"""Longest modules first, so that the xdist workers end together.

``--dist loadscope`` deals whole modules to the workers in the collection's order (scripts/test.sh
turns off xdist's own order, most tests first, which dealt the one-test integration modules of
10 s and more last: one worker ran them while the other waited). Dealing the longest first (LPT
scheduling) leaves the short ones to even out the end. The seconds are each module's setup, call
and teardown time summed over its tests, recorded by a run with ``--record-module-seconds`` into
``module_seconds.json``; a module not recorded yet counts as the longest, so a new module is never
the one a worker waits for. A stale record costs balance, never a result.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

RECORD = Path(__file__).resolve().parents[1] / "module_seconds.json"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-module-seconds", action="store_true",
                     help=f"write each module's time in this run into {RECORD.name} (the order "
                          "in which xdist deals modules: longest first)")


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def recorded_seconds(record: Path = RECORD) -> dict[str, float]:
    try:
        seconds = json.loads(record.read_text())
    except (FileNotFoundError, ValueError):
        return {}  # none yet, or a broken one (a merge's conflict marks): the collection's order
    if not isinstance(seconds, dict):
        return {}
    return {module: float(value) for module, value in seconds.items()
            if isinstance(value, (int, float))}


def longest_first(items: list, seconds: dict[str, float]) -> None:
    """Sorts the items (anything with a ``nodeid``) in place, their modules longest first; a
    module's tests keep their order, modules of equal time the collection's."""
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(module_of(item.nodeid), len(first_seen))
    items.sort(key=lambda item: (-seconds.get(module_of(item.nodeid), math.inf),
                                 first_seen[module_of(item.nodeid)]))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    longest_first(items, recorded_seconds())


class ModuleSeconds:
    """Sums the reports' durations per module where they all arrive (xdist's controller, or the
    one process of ``-n 0``) and writes them into the record when a passing session ends."""

    def __init__(self, root: Path, record: Path = RECORD) -> None:
        self.root, self.record = root, record
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[module_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if session.testsfailed or not self.seconds:
            return  # a failed run's times are no one's typical times
        self.write()

    def write(self) -> None:
        record = {module: value for module, value in recorded_seconds(self.record).items()
                  if (self.root / module).exists()}  # a deleted module's entry goes
        record.update(self.seconds)
        self.record.write_text(json.dumps({module: round(value, 1)
                                           for module, value in sorted(record.items())},
                                          indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("record_module_seconds") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(ModuleSeconds(config.rootpath), "module-seconds")
