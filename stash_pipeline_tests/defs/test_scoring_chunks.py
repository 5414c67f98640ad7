"""Every chunk bounded (issue 54): a background chunk takes the traces its worker scores in about
STASH_CHUNK_SECONDS, measured from the latest chunks; STASH_SCORING_BATCH fixes it instead."""

from __future__ import annotations

import dagster as dg
import pytest

from stash_pipeline.defs.resources import DEFAULT_SCORING_BATCH, SharedEvaluatorResource
from stash_pipeline.defs.scoring import chunks


def test_the_measured_asset_is_the_scoring_asset() -> None:
    from stash_pipeline.defs.scoring.assets import trace_scores

    assert chunks.SCORING_ASSET == trace_scores.key


def _chunk(instance: dg.DagsterInstance, traces: int, seconds: float) -> None:
    instance.report_runless_asset_event(dg.AssetMaterialization(
        chunks.SCORING_ASSET,
        metadata={chunks.SCORED_TRACES: traces, chunks.WORK_SECONDS: seconds}))


def test_a_chunk_takes_the_traces_of_its_target_seconds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STASH_SCORING_BATCH", raising=False)
    monkeypatch.delenv(chunks.CHUNK_SECONDS_ENV, raising=False)
    with dg.instance_for_test() as instance:
        # Before any chunk was measured: the first size.
        assert chunks.next_chunk_size(instance) == DEFAULT_SCORING_BATCH
        # 60 traces in 20 s, then 40 in 20 s: 2.5 traces a second, 30 s of them.
        _chunk(instance, 60, 20.0)
        _chunk(instance, 40, 20.0)
        assert chunks.next_chunk_size(instance) == 75
        monkeypatch.setenv(chunks.CHUNK_SECONDS_ENV, "10")
        assert chunks.next_chunk_size(instance) == 25
        # A fast worker: capped, so a run's config stays small; a slow one: one trace at least.
        for _ in range(chunks.MEASURED_CHUNKS):
            _chunk(instance, 2000, 1.0)
        assert chunks.next_chunk_size(instance) == chunks.MAX_CHUNK_TRACES
        for _ in range(chunks.MEASURED_CHUNKS):
            _chunk(instance, 1, 600.0)
        assert chunks.next_chunk_size(instance) == 1
        # STASH_SCORING_BATCH (or the resource's setting) fixes it.
        monkeypatch.setenv("STASH_SCORING_BATCH", "7")
        assert chunks.next_chunk_size(instance) == 7
        assert chunks.next_chunk_size(instance, SharedEvaluatorResource(scoring_batch=4)) == 4
