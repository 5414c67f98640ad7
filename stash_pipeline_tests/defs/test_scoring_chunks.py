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


def _evaluator_chunk(instance: dg.DagsterInstance, evaluator: str, traces: int,
                     seconds: float) -> None:
    instance.report_runless_asset_event(dg.AssetMaterialization(
        chunks.SCORING_ASSET, metadata={"evaluator": evaluator, chunks.SCORED_TRACES: traces,
                                        chunks.WORK_SECONDS: seconds}))


def test_each_evaluator_s_chunks_are_sized_from_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A personal model on a bigger base scores slower than the release whose chunks were
    measured: its next chunks shrink to its own speed; an evaluator not measured yet takes the
    latest chunks' of any."""
    monkeypatch.delenv("STASH_SCORING_BATCH", raising=False)
    monkeypatch.delenv(chunks.CHUNK_SECONDS_ENV, raising=False)
    with dg.instance_for_test() as instance:
        _evaluator_chunk(instance, "slow-model", 3, 30.0)  # 0.1 traces a second
        for _ in range(chunks.MEASURED_CHUNKS):
            _evaluator_chunk(instance, "r1", 300, 30.0)  # 10 traces a second
        assert chunks.next_chunk_size(instance, evaluator="r1") == 300
        assert chunks.next_chunk_size(instance, evaluator="slow-model") == 3
        assert chunks.next_chunk_size(instance, evaluator="new-model") == 300
        # A Score again of one chosen trace is no chunk: its worker start is not a speed.
        instance.report_runless_asset_event(dg.AssetMaterialization(
            chunks.SCORING_ASSET, metadata={"evaluator": "r1", "request": "a-request-id",
                                            chunks.SCORED_TRACES: 1, chunks.WORK_SECONDS: 3.0}))
        assert chunks.next_chunk_size(instance, evaluator="r1") == 300
        sizes = chunks.chunk_sizes(instance)
        assert (sizes("slow-model"), sizes("r1")) == (3, 300)


def _scored_by(store, evaluator: str, records) -> set[str]:
    return {r.trace.id for r in records if store.scored_version(r.trace.id, evaluator)}


@pytest.mark.slow
def test_a_chunk_stops_at_its_budget_and_the_next_chunk_scores_the_rest(
        db, instance, release_in_db, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first chunk (DEFAULT_SCORING_BATCH traces, before any measurement) carries the
    worker's budget; a budget spent after the worker's first group stores only the traces it
    finished, marks only those done, and the next chunk scores the rest: nothing lost, nothing
    half-scored. The real worker on a tiny model; counts and events, no clock."""
    from stash_pipeline.dagster_runs.in_process import run_sensor_requests
    from stash_pipeline.dagster_runs.instance import definitions
    from stash_pipeline.defs.scoring import sensors
    from stash_pipeline.worker.scoring import FIRST_GROUP
    from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records

    monkeypatch.delenv("STASH_SCORING_BATCH", raising=False)
    monkeypatch.delenv(chunks.CHUNK_SECONDS_ENV, raising=False)
    store, defs = db, definitions()
    records = agentprocessbench_records(9)
    store.import_traces(records)
    release_in_db(store)
    # A budget no group fits in: the worker stops after its first group, on any machine.
    with monkeypatch.context() as patched:
        patched.setattr(sensors, "chunk_seconds", lambda: 1e-6)
        [first] = run_sensor_requests(instance, defs, "pending_scoring")
    config = first.run_config["ops"]["trace_scores"]["config"]
    assert first.status == dg.DagsterRunStatus.SUCCESS
    assert (len(config["trace_ids"]), config["work_seconds"]) == (len(records), 1e-6)
    finished = set(config["trace_ids"][:FIRST_GROUP])
    assert _scored_by(store, "r1", records) == finished
    for record in records:  # each trace whole: all its action scores or none
        stored = store.action_scores_for(record.trace.id, "r1")
        assert len(stored) == (len(record.trace.actions()) if record.trace.id in finished else 0)
    queued = {w.trace_id for w in store.scoring_work(personal=False, limit=100)}
    assert queued == {r.trace.id for r in records} - finished
    said = (f"stopped after {FIRST_GROUP} of {len(records)} traces: the chunk's 1e-06 s budget; "
            "the rest stay queued")
    [event] = instance.fetch_materializations(chunks.SCORING_ASSET, limit=1).records
    metadata = event.asset_materialization.metadata
    assert metadata["budget_stop"].value == said
    assert metadata[chunks.SCORED_TRACES].value == FIRST_GROUP
    assert any(said in (e.user_message or "") for e in instance.all_logs(first.run_id))

    [second] = run_sensor_requests(instance, defs, "pending_scoring")
    config = second.run_config["ops"]["trace_scores"]["config"]
    assert set(config["trace_ids"]) == queued
    assert config["work_seconds"] == chunks.DEFAULT_CHUNK_SECONDS
    assert _scored_by(store, "r1", records) == {r.trace.id for r in records}
    for record in records:
        assert len(store.action_scores_for(record.trace.id, "r1")) == \
            len(record.trace.actions())
    assert store.scoring_work(personal=False, limit=100) == []


@pytest.mark.slow
def test_score_again_of_the_owner_set_runs_in_bounded_chunks(
        db, instance, release_in_db, monkeypatch: pytest.MonkeyPatch) -> None:
    """`rm score` (issue 54): the request's run queues the owner's every trace for the model and
    scores the first chunk itself; a request for chosen traces is served between chunks; the
    rest stays queued though the model is no longer kept current and a trace is reimported,
    and the queue's chunks score it; the model's Score again reads running, with the traces
    still queued, until they are all scored."""
    from dataclasses import replace

    from stash_pipeline.dagster_runs import run_state
    from stash_pipeline.dagster_runs.in_process import run_sensor_requests
    from stash_pipeline.dagster_runs.instance import definitions
    from stash_pipeline.pipelines import trace_scoring
    from stash_pipeline.services import reward_models, scoring_requests
    from stash_pipeline.store import TraceScore
    from stash_pipeline_tests.support.pipeline_helpers import agentprocessbench_records

    monkeypatch.setenv("STASH_SCORING_BATCH", "3")
    monkeypatch.setenv("STASH_PERSONAL_SCORING_MODELS", "1")
    monkeypatch.setattr(run_state, "get_instance", lambda: instance)
    store, defs = db, definitions()
    records = agentprocessbench_records(7)
    ids = [r.trace.id for r in records]
    store.import_traces(records)
    uri = release_in_db(store).checkpoint_uri

    def succeeded(name: str) -> str:
        model = reward_models.create(store, "ana", {"name": name, "trace_ids": ids[:1]})
        store.mark_running(model.id)
        store.mark_succeeded(model.id, metrics={"action_scoring_version": 1}, checkpoint_uri=uri,
                             scores=[TraceScore(t, 1, model.id, 0.0) for t in ids])
        return model.id

    old = succeeded("old")
    newer = succeeded("newer")  # the one model kept current now: old's queue would go
    reward_models.score_again(store, "ana", old)

    def score_again() -> dict:
        model = store.get_reward_model(old)
        return run_state.model_queue_fields(model, store.score_again_queued(old))["score_again"]

    [run] = run_sensor_requests(instance, defs, "score_again_requests")
    assert run.status == dg.DagsterRunStatus.SUCCESS
    assert run.tags["dagster/priority"] == "10"  # a request's: ahead of background chunks
    first = {w for w in ids if any(s.evaluator == old and s.raw != 0.0
                                   for s in store.scores_for(w))}
    assert len(first) == 3 and store.score_again_queued(old) == 4
    assert (score_again()["status"], score_again()["queued_traces"]) == ("running", 4)

    # A request for chosen traces, served between the chunks.
    waiting = sorted(set(ids) - first)
    request = scoring_requests.request(store, "ana", [waiting[0]], model_id=old, actions=True)
    [served] = run_sensor_requests(instance, defs, "score_again_for_traces",
                                   run_keys=[trace_scoring.request_run_key(request.run_ref)])
    assert served.status == dg.DagsterRunStatus.SUCCESS
    assert store.score_again_queued(old) == 3  # what it stored leaves the queue
    # Neither a model that succeeds later nor a reimport drops what was asked for.
    succeeded("newest")
    edited = records[ids.index(waiting[1])]
    last = edited.trace.messages[-1]
    store.import_traces([replace(edited, trace=replace(edited.trace, messages=(
        *edited.trace.messages[:-1], replace(last, content=last.content + " (edited)"))))])
    assert store.score_again_queued(old) == 3

    chunk_runs = run_sensor_requests(instance, defs, "pending_scoring")
    assert [r.status for r in chunk_runs] == [dg.DagsterRunStatus.SUCCESS] * len(chunk_runs)
    assert store.score_again_queued(old) == 0
    rows = {row.id: row for row in store.list_traces(owner="ana")}
    for trace_id in ids:  # every trace scored by old at its current version, none lost
        [score] = [s for s in store.scores_for(trace_id) if s.evaluator == old]
        assert score.trace_version == rows[trace_id].version and score.raw != 0.0
        assert len(store.action_scores_for(trace_id, old)) == \
            len(store.get_traces([trace_id])[0].actions())
    assert (score_again()["status"], score_again()["queued_traces"]) == ("succeeded", 0)
    assert newer != old
