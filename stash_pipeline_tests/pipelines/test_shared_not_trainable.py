"""The shared evaluator on outcome-labelled data says why it cannot train, in its own terms."""

from __future__ import annotations

import pytest

from stash_pipeline.core.feedback import VerifiedOutcome
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.split import NotEnoughPairsError
from stash_pipeline.extraction.config import ExtractionConfig
from stash_pipeline.pipelines import shared_evaluator
from stash_pipeline_tests.support.shared_samples import trace


def test_outcome_only_data_names_the_benchmark_only_rule_and_what_would_train(store):
    records = []
    for i in range(4):
        t = trace("airline", i, task_id=f"task-{i // 2}")
        records.append(ImportedTrace(t, (VerifiedOutcome(f"o{i}", t.id, float(i % 2)),)))
    store.import_traces(records)
    report = shared_evaluator.build_pairs(store, "c1", max_pairs=4000,
                                          config=ExtractionConfig(enabled=False))
    assert report["benchmark_pairs"] == 2 and report["pairs"] == 0
    assert "verified-outcome pair(s) are benchmark-only" in report["error"]
    with pytest.raises(NotEnoughPairsError) as error:
        shared_evaluator.split(store, "c1")
    message = str(error.value)
    assert message.startswith("training needs at least 2 usable pairs, found 0: ")
    assert "2 verified-outcome pair(s) are benchmark-only (the seed's rule)" in message
    assert "outside the benchmark's 2 task group(s)" in message
    assert "on the selected traces" not in message
