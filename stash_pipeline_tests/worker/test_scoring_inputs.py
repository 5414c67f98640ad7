"""A scoring job reads its traces from the JSON Lines the caller wrote, without the datasets
library (0.75 CPU-s of every scoring worker's start); a saved dataset still reads the same."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from stash_pipeline.compute import contract
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.serialize import trace_to_dict
from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records


def write_traces(job_dir, lines):
    (job_dir / f"{contract.SCORE_TRACES}.jsonl").write_text("\n".join(lines) + "\n")


def test_traces_are_read_from_json_lines_without_importing_datasets(tmp_path):
    traces = [r.trace for r in agentprocessbench_records(2)]
    write_traces(tmp_path, [json.dumps(trace_to_dict(t)) for t in traces])
    script = ("import sys\n"
              "from pathlib import Path\n"
              "import stash_pipeline.worker.runner\n"
              "from stash_pipeline.worker.inputs import traces_to_score\n"
              f"print([t.id for t in traces_to_score(Path({str(tmp_path)!r}))])\n"
              "print('datasets' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == [repr([t.id for t in traces]), "False"]
    assert not (tmp_path / contract.SCORE_TRACES).exists()  # no copy on disk


def test_a_saved_dataset_reads_the_same_traces(tmp_path):
    from datasets import Dataset

    from stash_pipeline.worker.inputs import traces_to_score

    traces = [r.trace for r in agentprocessbench_records(2)]
    Dataset.from_dict({contract.TRACE_COLUMN: [json.dumps(trace_to_dict(t)) for t in traces]}
                      ).save_to_disk(str(tmp_path / contract.SCORE_TRACES))
    assert [t.id for t in traces_to_score(tmp_path)] == [t.id for t in traces]


def test_a_bad_line_names_the_file_and_the_record(tmp_path):
    from stash_pipeline.worker.inputs import traces_to_score

    trace = agentprocessbench_records(1)[0].trace
    write_traces(tmp_path, [json.dumps(trace_to_dict(trace)), "{not json"])
    with pytest.raises(InputError) as error:
        traces_to_score(tmp_path)
    assert error.value.file == contract.SCORE_TRACES and error.value.record == "1"
