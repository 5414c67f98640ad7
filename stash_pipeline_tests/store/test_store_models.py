from __future__ import annotations

import pytest

from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.core.pairs import Pair, PairSide, pair_id
from stash_pipeline.core.requests import RewardModelRequest, parse_reward_model_request
from stash_pipeline.core.traces import action_messages
from stash_pipeline.core.training_settings import ERROR_TAIL_CHARS
from stash_pipeline.store import ActionScore, StatusError, Store, TraceScore
from stash_pipeline_tests.support.store_samples import make_record, make_trace


def request(name: str, trace_ids: list[str], **fields) -> RewardModelRequest:
    return parse_reward_model_request({"name": name, "trace_ids": trace_ids, **fields})


@pytest.fixture
def owned(store: Store) -> list[str]:
    store.import_traces([make_record(make_trace(f"t{i}", owner="ana")) for i in range(2)])
    return ["t0", "t1"]


def test_create_defaults_and_ownership(store: Store, owned) -> None:
    model = store.create_reward_model("ana", request("refund-policy-v2", owned))
    assert (model.status, model.base_model, model.epochs, model.max_pairs) == \
        ("queued", "Qwen/Qwen3-0.6B", 1, 4000)
    assert model.trace_ids == ("t0", "t1") and model.started_at is None
    assert store.get_reward_model(model.id, owner="ana") == model
    with pytest.raises(NotFoundError):
        store.get_reward_model(model.id, owner="bo")
    with pytest.raises(NotFoundError):
        store.get_reward_model("missing")
    assert [m.id for m in store.list_reward_models(owner="ana", status="queued")] == [model.id]
    assert store.list_reward_models(owner="bo") == []


def test_success_stores_metrics_checkpoint_and_scores_together(store: Store, owned) -> None:
    model = store.create_reward_model("ana", request("m", owned, epochs=2))
    store.mark_running(model.id)
    assert store.get_reward_model(model.id).started_at is not None
    action = make_trace("t0").actions()[0]
    store.mark_succeeded(
        model.id, metrics={"train_pairs": 8, "eval_accuracy": None, "device": "cpu"},
        checkpoint_uri="s3://bucket/rm/m.tar.gz",
        scores=[TraceScore("t0", 1, model.id, 1.5, 0.7), TraceScore("t1", 1, model.id, -0.5)],
        scored={"t0": 1}, action_scores=[ActionScore(action.id, "t0", 1, model.id, 0.3, 0.2)])
    done = store.get_reward_model(model.id)
    assert (done.status, done.metrics, done.checkpoint_uri, done.error) == \
        ("succeeded", {"train_pairs": 8, "eval_accuracy": None, "device": "cpu"},
         "s3://bucket/rm/m.tar.gz", None)
    assert done.finished_at is not None
    assert store.scores_for("t0") == [TraceScore("t0", 1, model.id, 1.5, 0.7)]
    assert store.action_scores_for("t0", model.id) == [
        ActionScore(action.id, "t0", 1, model.id, 0.3, 0.2)]
    assert {s.id: s.latest_score for s in store.list_traces("ana")} == {"t0": 1.5, "t1": -0.5}


def test_failure_keeps_the_log_tail_and_status_is_final(store: Store, owned) -> None:
    model = store.create_reward_model("ana", request("m", owned))
    store.mark_running(model.id)
    log = "start\n" + "x" * 3000 + "\nRuntimeError: fewer than 2 usable pairs"
    store.mark_failed(model.id, log)
    failed = store.get_reward_model(model.id)
    assert failed.status == "failed" and failed.error == log[-ERROR_TAIL_CHARS:]
    assert failed.error.endswith("fewer than 2 usable pairs")
    with pytest.raises(StatusError):
        store.mark_running(model.id)
    with pytest.raises(StatusError):
        store.mark_succeeded(model.id, metrics={}, checkpoint_uri="s3://x")
    assert store.get_reward_model(model.id).status == "failed"


def test_a_queued_model_may_fail_but_not_succeed(store: Store, owned) -> None:
    model = store.create_reward_model("ana", request("m", owned))
    with pytest.raises(StatusError):
        store.mark_succeeded(model.id, metrics={}, checkpoint_uri="s3://x",
                             scores=[TraceScore("t0", 1, model.id, 1.0)])
    assert store.scores_for("t0") == []  # nothing of the refused step landed
    store.mark_failed(model.id, "invalid extraction of comment c1")
    assert store.get_reward_model(model.id).status == "failed"


def _pairs() -> list[Pair]:
    trace = make_trace("t0", owner="ana")
    action, other = trace.actions()[1], trace.actions()[2]
    cut = trace.with_messages(action_messages(trace, action))
    return [
        Pair(pair_id("step_rating", "r1", action.id, other.id), "action",
             PairSide(cut, action.id),
             PairSide(trace.with_messages(action_messages(trace, other)), other.id),
             "step_rating", "r1", ("t0",), is_tool_call=True, tool_name="get_reservation",
             slices={"tool": "get_reservation", "domain": "airline", "agent": "gpt-4.1"}),
        Pair(pair_id("comment", "c1", action.id, "alt"), "action", PairSide(cut, action.id),
             PairSide(cut, action.id), "comment", "c1", ("t0",), evidence_quote="ask first",
             rationale="the comment asks", generated=True, slices={"tool": None}),
        Pair(pair_id("verified_outcome", "o", "t0", "t1"), "trace", PairSide(trace),
             PairSide(make_trace("t1", owner="ana")), "verified_outcome", "o", ("t0", "t1")),
    ]


def test_pairs_round_trip_exactly(store: Store, owned) -> None:
    model = store.create_reward_model("ana", request("m", owned))
    pairs = _pairs()
    assert store.save_pairs(pairs, reward_model_id=model.id) == 3
    assert store.load_pairs(reward_model_id=model.id) == pairs
    store.save_pairs(pairs[::-1], candidate="shared-7")
    assert store.load_pairs(candidate="shared-7") == pairs[::-1]
    store.save_pairs(pairs[:1], reward_model_id=model.id)  # replaces, not appends
    assert store.load_pairs(reward_model_id=model.id) == pairs[:1]
    assert store.load_pairs(candidate="shared-7") == pairs[::-1]
    with pytest.raises(ValueError):
        store.load_pairs()
    with pytest.raises(ValueError):
        store.save_pairs(pairs, reward_model_id=model.id, candidate="both")


def test_bad_requests_never_reach_the_table(store: Store, owned) -> None:
    store.import_traces([make_record(make_trace("b0", owner="bo"))])
    with pytest.raises(InputError) as unowned:
        store.create_reward_model("ana", request("m", ["t0", "b0"]))
    assert unowned.value.field == "trace_ids[1]" and "b0" in str(unowned.value)
    with pytest.raises(InputError):
        store.create_reward_model("ana", request("m", ["nowhere"]))
    store.create_account("old", reward_models_enabled=False)
    with pytest.raises(NotFoundError):
        store.create_reward_model("old", request("m", owned))
    assert store.list_reward_models() == []


def test_retry_runs_a_new_attempt_and_score_again_counts_requests(store: Store, owned) -> None:
    model = store.create_reward_model("ana", request("m", owned))
    assert store.mark_running(model.id) == 1
    store.mark_failed(model.id, "worker killed (signal 9)")
    with pytest.raises(StatusError):
        store.request_score_again(model.id)
    store.requeue(model.id)
    queued = store.get_reward_model(model.id)
    assert (queued.status, queued.error, queued.attempt) == ("queued", None, 2)
    assert store.mark_running(model.id) == 2
    store.mark_succeeded(model.id, metrics={}, checkpoint_uri="file:///m.tar.gz",
                         scores=[TraceScore("t0", 1, model.id, 1.0)])
    assert store.request_score_again(model.id) == 1
    assert store.request_score_again(model.id) == 2
    store.replace_scores(model.id, scores=[TraceScore("t0", 1, model.id, 2.0, 0.6)], scored={})
    assert store.scores_for("t0") == [TraceScore("t0", 1, model.id, 2.0, 0.6)]


def test_a_failed_attempt_resumes_in_a_re_execution_and_only_a_failed_one(store: Store,
                                                                           owned) -> None:
    model = store.create_reward_model("ana", request("m", owned))
    with pytest.raises(StatusError, match="only a failed attempt"):
        store.resume(model.id, "run-2")  # queued
    store.mark_running(model.id, "run-1")
    with pytest.raises(StatusError, match="only a failed attempt"):
        store.resume(model.id, "run-2")  # running
    store.mark_failed(model.id, "OSError: the database went away")
    assert store.resume(model.id, "run-2") == 1
    resumed = store.get_reward_model(model.id)
    assert (resumed.status, resumed.attempt, resumed.run_id) == ("running", 1, "run-2")
    assert resumed.error is None and resumed.finished_at is None
    store.mark_succeeded(model.id, metrics={}, checkpoint_uri="file:///m.tar.gz")
    with pytest.raises(StatusError, match="only a failed attempt"):
        store.resume(model.id, "run-3")  # succeeded
    assert store.get_reward_model(model.id).status == "succeeded"


def test_a_split_labels_every_stored_pair(store: Store, owned) -> None:
    model = store.create_reward_model("ana", request("m", owned))
    pairs = _pairs()
    store.save_pairs(pairs, reward_model_id=model.id)
    with pytest.raises(ValueError):
        store.save_split({pairs[0].id: "train"}, reward_model_id=model.id)
    store.save_split({pairs[0].id: "train", pairs[1].id: "train", pairs[2].id: "eval"},
                     reward_model_id=model.id)
    assert store.load_pairs(reward_model_id=model.id, split="train") == pairs[:2]
    assert store.load_pairs(reward_model_id=model.id, split="eval") == pairs[2:]


def test_success_is_all_or_nothing(store: Store, owned) -> None:
    """Metrics, checkpoint and scores land with the status in one transaction, or none of them."""
    model = store.create_reward_model("ana", request("m", owned))
    store.mark_running(model.id, "run-1")
    action = make_trace("t0").actions()[0]
    with pytest.raises(ValueError):
        store.mark_succeeded(
            model.id, metrics={"train_pairs": 3}, checkpoint_uri="file:///m.tar.gz",
            scores=[TraceScore("t0", 1, model.id, 1.5, 0.7)], scored={"t0": 1},
            # an action score of another evaluator: refused after the status and scores were written
            action_scores=[ActionScore(action.id, "t0", 1, "someone-else", 0.3, 0.2)])
    after = store.get_reward_model(model.id)
    assert (after.status, after.metrics, after.checkpoint_uri) == ("running", None, None)
    assert store.scores_for("t0") == [] and store.action_scores_for("t0") == []


def test_a_candidates_benchmark_pairs_are_kept_apart_from_its_split(store: Store, owned) -> None:
    pairs = _pairs()
    store.save_pairs(pairs[:2], candidate="c1")
    assert store.save_benchmark_pairs(pairs[2:], candidate="c1") == 1
    assert store.load_pairs(candidate="c1") == pairs[:2]
    assert store.load_pairs(candidate="c1", split="benchmark") == pairs[2:]
    # The split labels the training pairs only; the benchmark pairs keep their label.
    store.save_split({pairs[0].id: "train", pairs[1].id: "eval"}, candidate="c1")
    assert store.load_pairs(candidate="c1", split="benchmark") == pairs[2:]
    store.save_benchmark_pairs(pairs[:1], candidate="c1")  # replaces the benchmark only
    assert store.load_pairs(candidate="c1", split="benchmark") == pairs[:1]
    assert store.load_pairs(candidate="c1", split="train") == pairs[:1]
    store.save_pairs(pairs[1:2], candidate="c1")  # new pairs clear the old benchmark too
    assert store.load_pairs(candidate="c1", split="benchmark") == []


def test_shared_training_requests_come_back_in_order_after_a_cursor(store: Store) -> None:
    first = store.request_shared_training()
    second = store.request_shared_training(base_model="/models/tiny", epochs=3)
    assert (first.base_model, first.epochs) == (None, None)
    assert [r.id for r in store.shared_training_requests()] == [first.id, second.id]
    assert store.shared_training_requests(after=first.id) == [second]
    assert store.shared_training_requests(after=second.id) == []


def test_a_queued_model_records_its_run_and_stays_queued_until_the_worker(store: Store,
                                                                          owned) -> None:
    """Issue 43: a run takes the model up while it waits for the worker; a retry's new attempt
    forgets the old run, so a late failure of that run cannot speak for it."""
    model = store.create_reward_model("ana", request("m", owned))
    store.assign_run(model.id, "run-1")
    queued = store.get_reward_model(model.id)
    assert (queued.status, queued.run_id, queued.started_at) == ("queued", "run-1", None)
    assert store.mark_running(model.id, "run-1") == 1
    with pytest.raises(StatusError, match="only a queued model"):
        store.assign_run(model.id, "run-2")
    store.mark_failed(model.id, "worker killed (signal 9)")
    store.requeue(model.id)
    again = store.get_reward_model(model.id)
    assert (again.status, again.attempt, again.run_id) == ("queued", 2, None)
