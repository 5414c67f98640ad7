"""The review queue and the trust report (issue 49): a personal model that does not beat its
baselines does not order the queue, and the queue says why; the queue says what a review
becomes, with the counts so far (SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses
import random

from stash_pipeline.core.feedback import Comment, VerifiedOutcome, feedback_id
from stash_pipeline.core.requests import parse_reward_model_request
from stash_pipeline.extraction.config import ExtractionConfig
from stash_pipeline.services import accounts, review, trust as trust_service
from stash_pipeline.store import Store, TraceScore
from stash_pipeline_tests.support.store_samples import make_record, make_trace

TASKS, TRIALS = 12, 4


def _random_model_world(store: Store) -> tuple[str, str]:
    """12 tasks x 4 trials: short traces succeed; a tiny random model scored every trace."""
    account, _ = accounts.create(store, "ana")
    rng = random.Random(3)
    records, ids = [], []
    for task in range(TASKS):
        for trial in range(TRIALS):
            turns = 1 + rng.randint(0, 5)
            trace = dataclasses.replace(
                make_trace(f"t{task}-{trial}", owner=account.id, turns=turns,
                           text=f"task {task}"),
                metadata={"task_id": f"task-{task}"})
            won = turns <= 3
            records.append(make_record(trace, feedback=[VerifiedOutcome(
                feedback_id("outcome", trace.id), trace.id, 1.0 if won else 0.0)]))
            ids.append(trace.id)
    store.import_traces(records)
    model = store.create_reward_model(account.id, parse_reward_model_request(
        {"name": "tiny", "trace_ids": ids[:1]}))
    store.mark_running(model.id)
    store.mark_succeeded(model.id, checkpoint_uri="file:///x", scored={t: 1 for t in ids},
                         metrics={"eval_pairs": 0, "eval_accuracy": None},
                         scores=[TraceScore(t, 1, model.id, rng.gauss(0.0, 0.01),
                                            rng.random()) for t in ids])
    return account.id, model.id


def test_a_model_that_does_not_beat_its_baselines_does_not_order_the_queue(store: Store):
    owner, model_id = _random_model_world(store)
    verdict = trust_service.model_report(store, owner, model_id)["verdict"]
    assert verdict["judged"] and not verdict["beats_baselines"]
    scope = review.scope(store, owner, reviewer="ana")
    assert scope.model_id is None  # its verdicts are not read ...
    assert scope.set_aside.startswith(f"Not ordered by personal model {model_id}")
    assert verdict["label"] in scope.set_aside  # ... and the queue says why
    page = review.queue(store, scope, limit=200)
    assert page["model_set_aside"] == scope.set_aside and page["model_id"] is None
    assert all(item["personal_verdict"] is None for item in page["items"])
    assert {item["reason"] for item in page["items"]} == {"unscored"}  # no release either
    assert review.next_item(store, scope)["model_set_aside"] == scope.set_aside


def test_the_queue_says_what_a_review_becomes_with_the_counts_so_far(store: Store):
    owner, _ = _random_model_world(store)
    store.add_feedback([Comment(feedback_id("comment", "t0-0"), "t0-0", "Asked twice.",
                                author="ana")], owner=owner)
    yields = review.review_yields(store, owner, "ana", ExtractionConfig(api_key=None))
    by_action = {a["action"]: a for a in yields["actions"]}
    assert by_action["approve a comparison"]["becomes_pairs"]
    assert not by_action["comment"]["becomes_pairs"] and by_action["comment"]["so_far"] == 1
    assert "only with extraction configured" in by_action["comment"]["text"]
    assert not by_action["mark done"]["becomes_pairs"]
    configured = review.review_yields(store, owner, "ana", ExtractionConfig(api_key="k"))
    assert configured["extraction_configured"] and configured["actions"][1]["becomes_pairs"]
    review.set_status(store, owner, [("trace", "t1-0")], "reviewed", reviewer="ana")
    assert review.review_yields(store, owner, "ana")["actions"][3]["so_far"] == 1
