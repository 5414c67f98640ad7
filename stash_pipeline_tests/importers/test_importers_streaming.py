"""Reading is incremental: records come out before the rest of the file has been parsed."""

from __future__ import annotations

import json

import pytest

from stash_pipeline.core.errors import InputError
from stash_pipeline.importers import read_path
from stash_pipeline_tests.support.importer_helpers import read_all, write_json

RECORDS = 2_000


def trace(i: int) -> dict:
    return {"id": f"t{i}", "messages": [{"role": "user", "content": f"question {i}"},
                                        {"role": "assistant", "content": f"answer {i} " * 20}]}


def test_jsonl_yields_records_before_reading_a_broken_tail(tmp_path):
    path = tmp_path / "stream.jsonl"
    path.write_text("".join(json.dumps(trace(i)) + "\n" for i in range(RECORDS)) + "{broken\n")
    records = read_path(path)
    assert [next(records).trace.id for _ in range(3)] == ["t0", "t1", "t2"]
    with pytest.raises(InputError) as caught:
        list(records)
    assert caught.value.record == f"line {RECORDS + 1}"


def test_a_json_array_is_read_item_by_item(tmp_path):
    path = tmp_path / "stream.json"
    body = ",\n".join(json.dumps(trace(i)) for i in range(RECORDS))
    path.write_text("[\n" + body + ",\n{broken")
    records = read_path(path)
    assert next(records).trace.id == "t0"  # the broken end is far beyond the first read buffer
    with pytest.raises(InputError) as caught:
        list(records)
    assert caught.value.record == f"line {RECORDS + 2}"


def test_tau2_simulations_are_read_one_at_a_time(tmp_path):
    simulations = ",\n".join(json.dumps({"id": f"s{i}", "task_id": i,
                                         "messages": trace(i)["messages"]})
                             for i in range(RECORDS))
    path = tmp_path / "run.json"
    path.write_text('{"info": {"environment_info": {"domain_name": "d", "policy": "P"}},\n'
                    '"simulations": [\n' + simulations + ",\n{broken")
    records = read_path(path)
    first = next(records)
    assert (first.trace.id, first.trace.domain, first.trace.messages[0].content) == ("s0", "d", "P")
    with pytest.raises(InputError):
        list(records)


def test_nothing_is_read_until_asked(tmp_path):
    path = write_json(tmp_path, "t.json", [trace(0)])
    records = read_path(path)
    path.write_text(json.dumps([trace(1)]))  # changed before the first record is asked for
    assert [r.trace.id for r in records] == ["t1"]
    assert [r.trace.id for r in read_all(path)] == ["t1"]
