"""The order xdist deals the modules in: the longest recorded first, unrecorded ones before them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from stash_pipeline_tests.support.module_order import (
    RECORD,
    ModuleSeconds,
    longest_first,
    recorded_seconds,
)


def items(*nodeids: str) -> list:
    return [SimpleNamespace(nodeid=nodeid) for nodeid in nodeids]


def test_longest_module_first_each_module_in_its_own_order():
    collected = items("a.py::one", "a.py::two", "b.py::one", "c.py::one", "c.py::two", "d.py::one")
    longest_first(collected, {"a.py": 1.0, "b.py": 9.5, "c.py": 3.0, "d.py": 3.0})
    assert [item.nodeid for item in collected] == [
        "b.py::one", "c.py::one", "c.py::two", "d.py::one", "a.py::one", "a.py::two"]


def test_a_module_not_recorded_yet_goes_first():
    collected = items("a.py::one", "new.py::one", "b.py::one")
    longest_first(collected, {"a.py": 1.0, "b.py": 2.0})
    assert [item.nodeid for item in collected] == ["new.py::one", "b.py::one", "a.py::one"]


@pytest.mark.parametrize("text", ["<<<<<<< HEAD\n{}", "[1, 2]", '{"a.py": "slow", "b.py": 2}'])
def test_a_broken_record_costs_only_the_order(tmp_path, text):
    record = tmp_path / "module_seconds.json"
    record.write_text(text)
    assert recorded_seconds(record) == ({"b.py": 2.0} if "b.py" in text else {})


def report(nodeid: str, duration: float) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, duration=duration)


def test_the_record_sums_each_modules_phases_keeps_others_and_drops_deleted_modules(tmp_path):
    (tmp_path / "kept.py").touch()
    (tmp_path / "ran.py").touch()
    record = tmp_path / "module_seconds.json"
    record.write_text(json.dumps({"kept.py": 4.0, "ran.py": 99.0, "deleted.py": 3.0}))
    seconds = ModuleSeconds(tmp_path, record)
    for phase_duration in (0.25, 1.5, 0.25):  # setup, call, teardown
        seconds.pytest_runtest_logreport(report("ran.py::test_one", phase_duration))
    seconds.pytest_runtest_logreport(report("ran.py::test_two", 1.0))
    seconds.pytest_sessionfinish(SimpleNamespace(testsfailed=0))
    assert json.loads(record.read_text()) == {"kept.py": 4.0, "ran.py": 3.0}


def test_a_failed_run_records_nothing(tmp_path):
    record = tmp_path / "module_seconds.json"
    seconds = ModuleSeconds(tmp_path, record)
    seconds.pytest_runtest_logreport(report("ran.py::test_one", 1.0))
    seconds.pytest_sessionfinish(SimpleNamespace(testsfailed=1))
    assert not record.exists()


def test_the_committed_record_names_only_modules_that_exist():
    root = RECORD.parent.parent
    assert recorded_seconds(), f"{RECORD.name} is empty or broken: run with --record-module-seconds"
    assert [module for module in recorded_seconds() if not (root / module).exists()] == []
