"""The review queue and trace search in SQL, on both databases: the order core.review_order
defines, what counts as reviewed, skips, assignments, and every search filter."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import Comment, ReviewedComparison, VerifiedOutcome, feedback_id
from stash_pipeline.core.review_order import Verdicts, personal_verdict, reason, sort_key
from stash_pipeline.core.trace_search import TraceFilter, parse_filter
from stash_pipeline.store import ActionScore, Release, Store, TraceScore, schema
from stash_pipeline.store.review_queue import QueueScope
from stash_pipeline_tests.support.store_samples import make_record, make_trace

RELEASE = "20260101-000000-release"
MODEL = "model-1"


def _world(store: Store, n: int, seed: int = 0) -> dict[str, Verdicts]:
    """``n`` traces of ``alice`` with random release credit, personal scores (action credit on
    some, whole-trace calibrated scores on others) and outcomes; their verdicts as core sees
    them."""
    rng = random.Random(seed)
    traces = [make_trace(f"t{i:03d}", owner="alice", turns=1, text=f"case {i}")
              for i in range(n)]
    store.import_traces([make_record(t) for t in traces])
    store.save_release(Release(RELEASE, "file:///x", {}, {}))
    with store.transaction() as c:
        c.execute(schema.reward_models.insert().values(
            id=MODEL, owner="alice", name="m", trace_ids=[], base_model="b", epochs=1,
            max_pairs=10, status="succeeded", finished_at=schema.utcnow()))
    verdicts = {}
    outcomes = []
    for i, trace in enumerate(traces):
        actions = trace.actions()
        shared = [rng.choice([rng.uniform(-1, 1), rng.uniform(-0.15, 0.15)]) for _ in actions] \
            if rng.random() < 0.8 else []
        store.save_action_scores(RELEASE, {trace.id: 1}, [
            ActionScore(a.id, trace.id, 1, RELEASE, raw=c, credit=c)
            for a, c in zip(actions, shared)])
        personal_credit, calibrated = [], None
        kind = rng.random()
        if kind < 0.35:
            personal_credit = [rng.uniform(-1, 1) for _ in actions]
            store.save_action_scores(MODEL, {trace.id: 1}, [
                ActionScore(a.id, trace.id, 1, MODEL, raw=c, credit=c)
                for a, c in zip(actions, personal_credit)])
        elif kind < 0.7:
            calibrated = rng.uniform(0, 1)
            store.save_scores([TraceScore(trace.id, 1, MODEL, raw=calibrated,
                                          calibrated=calibrated)])
        succeeded = None
        if rng.random() < 0.5:
            succeeded = rng.random() < 0.5
            outcomes.append(VerifiedOutcome(feedback_id("outcome", trace.id), trace.id,
                                            1.0 if succeeded else 0.0, source="tau2"))
        mean = sum(personal_credit) / len(personal_credit) if personal_credit else None
        nearest = [abs(c) for c in shared] or [abs(c) for c in personal_credit]
        verdicts[trace.id] = Verdicts(
            shared=sum(shared) / len(shared) if shared else None,
            personal=personal_verdict(mean, calibrated), outcome_succeeded=succeeded,
            nearest=min(nearest) if nearest else None)
    store.add_feedback(outcomes)
    return verdicts


def _scope(**changes) -> QueueScope:
    return QueueScope(**{"owner": "alice", "reviewer": "alice", "release": RELEASE,
                         "model_id": MODEL, **changes})


def test_the_queue_sorts_in_sql_as_core_review_order_says(store: Store) -> None:
    verdicts = _world(store, 60)
    items, counts = store.review_queue(_scope(), limit=500)
    assert (counts.total, counts.pending) == (60, 60)
    assert [i.reason for i in items] == [reason(verdicts[i.id]) for i in items]
    expected = sorted(verdicts, key=lambda t: (
        ["disagreement", "outcome", "near_reference", "score", "unscored"].index(
            reason(verdicts[t])), round(sort_key(verdicts[t]), 9), t))
    assert [i.id for i in items] == expected
    # Every reason shows up in a world this size, so each SQL branch was exercised.
    assert {i.reason for i in items} == {"disagreement", "outcome", "near_reference", "score",
                                         "unscored"}
    page = store.review_queue(_scope(), limit=7, offset=7)[0]
    assert [i.id for i in page] == expected[7:14]


def test_reviewed_skipped_and_assigned_items(store: Store) -> None:
    _world(store, 12, seed=3)
    first, second, third, fourth = (i.id for i in store.review_queue(_scope(), limit=4)[0])
    # A comment is a review; so is "done" at the current version; a skip moves the item last.
    store.add_feedback([Comment(feedback_id("comment", first, "x"), first, "too slow")])
    store.set_review_status("alice", [("trace", second)], "reviewed", reviewer="alice",
                            versions={second: 1})
    store.set_review_status("alice", [("trace", third)], "skipped", reviewer="alice")
    items, counts = store.review_queue(_scope(), limit=100)
    assert (counts.total, counts.pending, counts.reviewed) == (12, 10, 2)
    assert items[0].id == fourth and items[-1].id == third
    assert items[-1].reason == "skipped" and items[-1].status == "skipped"
    # Back in the queue: "done" at an older version (a reimport changed the content).
    with store.transaction() as c:
        c.execute(schema.traces.update().where(schema.traces.c.id == second)
                  .values(version=2))
    assert store.review_queue(_scope(), limit=100)[1].pending == 11
    store.assign_review("alice", [("trace", fourth)], "bo")
    mine = store.review_queue(_scope(assignee="bo"), limit=100)
    assert [i.id for i in mine[0]] == [fourth] and mine[1].total == 1
    assert mine[0][0].assignee == "bo"
    store.set_review_status("alice", [("trace", fourth)], "skipped", reviewer="bo")
    assert store.review_queue(_scope(assignee="bo"), limit=1)[0][0].assignee == "bo"
    assert fourth not in {i.id for i in store.review_queue(_scope(unassigned=True),
                                                           limit=100)[0]}


def test_comparisons_by_others_come_first_and_leave_when_reviewed(store: Store) -> None:
    _world(store, 6, seed=5)
    by_ana = ReviewedComparison(feedback_id("comparison", "t000", "t001", "ana"), "t000",
                                "t001", status="pending", author="ana")
    by_alice = ReviewedComparison(feedback_id("comparison", "t002", "t003", "alice"), "t002",
                                  "t003", status="pending", author="alice")
    store.add_feedback([by_ana, by_alice], owner="alice")
    items, counts = store.review_queue(_scope(), limit=100)
    assert (items[0].kind, items[0].id, items[0].reason) == ("comparison", by_ana.id,
                                                             "comparison")
    assert by_alice.id not in {i.id for i in items}  # not alice's to review
    # The compared traces carry feedback now: reviewed; the comparison is the item.
    assert {"t000", "t001", "t002", "t003"}.isdisjoint(i.id for i in items)
    assert (counts.total, counts.pending) == (7, 3)
    only = store.review_queue(_scope(kinds=("comparison",)), limit=100)[0]
    assert [i.id for i in only] == [by_ana.id]
    store.review_comparison(by_ana.id, reviewer="alice", status="approved", owner="alice")
    items, counts = store.review_queue(_scope(), limit=100)
    assert items[0].kind == "trace" and (counts.total, counts.pending) == (7, 2)
    # Filters reach comparisons through either of their traces.
    assert store.review_queue(_scope(where=TraceFilter(task_id="nope")), limit=9)[1].total == 0


def test_another_accounts_items_never_show(store: Store) -> None:
    _world(store, 4)
    store.import_traces([make_record(make_trace("bob-1", owner="bob"))])
    assert "bob-1" not in {i.id for i in store.review_queue(_scope(), limit=100)[0]}
    assert store.review_queue(_scope(owner="bob", reviewer="bob"), limit=9)[1].total == 1


def test_search_filters(store: Store) -> None:
    _world(store, 20, seed=1)
    store.import_traces([make_record(make_trace("needle", owner="alice", turns=1,
                                                text="Refund my ÉCONOMY 100% seat_x"))])

    def ids(**values) -> list[str]:
        return store.matching_trace_ids("alice", where=parse_filter(values),
                                        shared_evaluator=RELEASE)

    assert ids(q="économy 100%") == ["needle"] and ids(q="ECONOMY") == []
    assert ids(q="seat_x") == ["needle"] and ids(q="seat%x") == []  # LIKE's wildcards are text
    assert ids(q="follow the refund policy") == []  # system prompts are not searched
    assert len(ids(tool="get_user")) == 21 and ids(tool="cancel") == []
    assert len(ids(task_id="7")) == 21
    outcomes = {o: set(ids(outcome=o)) for o in ("succeeded", "failed", "none")}
    assert sum(map(len, outcomes.values())) == 21 and "needle" in outcomes["none"]
    assert not outcomes["succeeded"] & outcomes["failed"]
    low = set(ids(credit_max="-0.2"))
    high = set(ids(credit_min="0.2"))
    assert low and high and not low & high and "needle" not in low | high
    with store.reading() as c:
        a = schema.action_scores
        means = dict(c.execute(sa.select(a.c.trace_id, sa.func.avg(a.c.credit))
                               .where(a.c.evaluator == RELEASE).group_by(a.c.trace_id)).all())
    assert low == {t for t, m in means.items() if m <= -0.2}
    today = datetime.now(timezone.utc).date()
    assert len(ids(created_from=today.isoformat())) == 21
    assert ids(created_to=(today - timedelta(days=1)).isoformat()) == []
    assert ids(state="pending") == ["needle"]
    summary = store.list_traces(owner="alice", where=parse_filter({"q": "économy"}))
    assert summary[0].preview == "Héllo ✈️ Refund my ÉCONOMY 100% seat_x"
    scored = [s for s in store.list_traces(owner="alice") if s.actions_scored]
    assert all(s.min_action_credit <= s.mean_action_credit for s in scored)
    facets = store.trace_facets("alice")
    assert facets["tool"] == ["get_reservation", "get_user"]


def test_bad_filters_name_their_parameter() -> None:
    for values, field in (({"outcome": "maybe"}, "outcome"), ({"credit_min": "2"}, "credit_min"),
                          ({"credit_max": "nan"}, "credit_max"),
                          ({"credit_min": "0.5", "credit_max": "0.1"}, "credit_min"),
                          ({"created_from": "yesterday"}, "created_from"),
                          ({"q": "a\x00b"}, "q"), ({"state": "done"}, "state"),
                          ({"q": "x" * 201}, "q")):
        with pytest.raises(InputError) as caught:
            parse_filter(values)
        assert caught.value.field == field, values
    assert not parse_filter({"q": "  ", "agent": ""})


def test_saved_filters_are_the_accounts_own(store: Store) -> None:
    store.import_traces([make_record(make_trace("x", owner="alice")),
                         make_record(make_trace("y", owner="bob"))])
    saved = store.save_filter("alice", "failures", {"outcome": "failed"})
    again = store.save_filter("alice", "failures", {"outcome": "failed", "tool": "get_user"})
    assert again.id == saved.id and again.params["tool"] == "get_user"
    assert [f.name for f in store.saved_filters("alice")] == ["failures"]
    assert store.saved_filters("bob") == []
    from stash_pipeline.core.errors import NotFoundError

    with pytest.raises(NotFoundError):
        store.saved_filter("bob", filter_id=saved.id)
    with pytest.raises(NotFoundError):
        store.remove_filter("bob", saved.id)
    store.remove_filter("alice", saved.id)
    assert store.saved_filters("alice") == []
