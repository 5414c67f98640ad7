"""Verified outcomes read from metadata in each trace format, and gzip in every layout."""

from __future__ import annotations

import gzip
import shutil

import pytest

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import VerifiedOutcome
from stash_pipeline_tests.support.importer_helpers import (
    read_all,
    shared_data,
    write_json,
    write_jsonl,
)

TURNS = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def outcomes(records) -> list[tuple[str, float, str]]:
    return [(f.trace_id, f.reward, f.source) for r in records for f in r.feedback
            if isinstance(f, VerifiedOutcome)]


@pytest.mark.parametrize("extra", [{}, {"system": "Be kind."}])  # openai, then anthropic
def test_metadata_outcome_in_chat_formats(tmp_path, extra):
    records = [{"id": "won", "metadata": {"outcome": 1}, "messages": TURNS, **extra},
               {"id": "lost", "metadata": {"outcome": False}, "messages": TURNS, **extra},
               {"id": "none", "metadata": {"outcome": None}, "messages": TURNS, **extra}]
    found = outcomes(read_all(write_jsonl(tmp_path, "t.jsonl", records)))
    assert found == [("won", 1.0, "metadata.outcome"), ("lost", 0.0, "metadata.outcome")]


def test_outcome_field_is_a_dotted_path_and_none_turns_it_off(tmp_path):
    path = write_jsonl(tmp_path, "t.jsonl", [
        {"id": "a", "metadata": {"eval": {"reward": 0.5}, "outcome": 1}, "messages": TURNS}])
    assert outcomes(read_all(path, outcome_field="eval.reward")) == [
        ("a", 0.5, "metadata.eval.reward")]
    assert outcomes(read_all(path, outcome_field=None)) == []
    bad = write_jsonl(tmp_path, "bad.jsonl", [
        {"id": "b", "metadata": {"outcome": {"reward": 1}}, "messages": TURNS}])
    with pytest.raises(InputError) as caught:
        read_all(bad)
    assert (caught.value.record, caught.value.field) == ("line 1", "metadata.outcome")


def test_gzip_in_every_layout(tmp_path):
    run = shared_data("tau2-bench", "runs", "retail_gpt-4.1.json")
    packed = tmp_path / "run.json.gz"
    with open(run, "rb") as source, gzip.open(packed, "wb") as target:
        shutil.copyfileobj(source, target)
    assert len(read_all(packed)) == len(read_all(run)) > 0  # one JSON document (tau2)
    array = write_json(tmp_path, "a.json", [{"id": "x", "messages": TURNS}])
    with open(array, "rb") as source, gzip.open(tmp_path / "a.json.gz", "wb") as target:
        shutil.copyfileobj(source, target)
    assert [r.trace.id for r in read_all(tmp_path / "a.json.gz")] == ["x"]


@pytest.mark.parametrize("cut", [10, 40])
def test_a_corrupt_or_cut_gzip_file_is_an_input_error(tmp_path, cut):
    path = tmp_path / "t.jsonl.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("".join(f'{{"id": "t{i}", "messages": []}}\n' for i in range(50)))
    path.write_bytes(path.read_bytes()[:cut])
    with pytest.raises(InputError) as caught:
        read_all(path)
    assert caught.value.file == str(path) and "gzip" in caught.value.reason
