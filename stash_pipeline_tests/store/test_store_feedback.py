from __future__ import annotations

from dataclasses import replace

import pytest

from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.core.feedback import Comment, Rating, feedback_id
from stash_pipeline.store import Store
from stash_pipeline_tests.support.store_samples import (
    comparison,
    feedback_on,
    make_record,
    make_trace,
)


@pytest.fixture
def two_traces(store: Store):
    a, b = make_trace("a"), make_trace("b", owner="bo")
    store.import_traces([make_record(a), make_record(b)])
    return a, b


def test_feedback_round_trip(store: Store, two_traces) -> None:
    a, b = two_traces
    items = [*feedback_on(a), comparison(a, b)]
    assert store.add_feedback(items) == {"comments": 1, "ratings": 2, "comparisons": 1,
                                         "outcomes": 1}
    assert set(store.feedback_for(["a"])) == set(items)
    assert store.feedback_for(["b"]) == [comparison(a, b)]
    assert store.feedback_for([]) == []


def test_same_feedback_id_updates_in_place(store: Store, two_traces) -> None:
    a, _ = two_traces
    rating = Rating(feedback_id("rating", "a"), "a", 1.0)
    store.add_feedback([rating])
    store.add_feedback([replace(rating, value=-1.0)])
    assert store.feedback_for(["a"]) == [replace(rating, value=-1.0)]


def test_feedback_on_unknown_trace_or_action_writes_nothing(store: Store, two_traces) -> None:
    a, _ = two_traces
    good = Comment(feedback_id("comment", "a", "ok"), "a", "fine")
    with pytest.raises(NotFoundError, match="trace ghost"):
        store.add_feedback([good, Comment(feedback_id("comment", "ghost"), "ghost", "?")])
    with pytest.raises(NotFoundError, match="action a/m77"):
        store.add_feedback([good, Rating(feedback_id("rating", "x"), "a", 1.0,
                                         action_id="a/m77")])
    assert store.feedback_for(["a"]) == []


def test_an_action_of_another_trace_is_rejected(store: Store, two_traces) -> None:
    _, b = two_traces
    stray = Rating(feedback_id("rating", "y"), "a", 1.0, action_id=b.actions()[0].id)
    with pytest.raises(InputError) as caught:
        store.add_feedback([stray])
    assert caught.value.field == "action_id"


def test_observations_are_not_actions(store: Store, two_traces) -> None:
    # message 1 is the user's: no action id exists for it, so feedback on it is refused.
    with pytest.raises(NotFoundError, match="a/m1"):
        store.add_feedback([Rating(feedback_id("rating", "z"), "a", 1.0, action_id="a/m1")])


def test_feedback_on_another_owners_trace_is_not_found(store: Store, two_traces) -> None:
    a, b = two_traces  # a belongs to "local", b to "bo"
    assert store.add_feedback(feedback_on(b)[:1], owner="bo")["comments"] == 1
    with pytest.raises(NotFoundError, match="trace a"):
        store.add_feedback([comparison(b, a)], owner="bo")
    assert comparison(b, a) not in store.feedback_for(["b"])


def test_a_review_keeps_the_author_and_names_the_reviewer(store: Store, two_traces) -> None:
    a, b = two_traces
    store.add_feedback([replace(comparison(a, b), status="pending", reviewer=None, author="ana")])
    comparison_id = comparison(a, b).id
    reviewed = store.review_comparison(comparison_id, reviewer="bo", status="approved")
    assert (reviewed.author, reviewed.reviewer, reviewed.status) == ("ana", "bo", "approved")
    assert reviewed.independently_reviewed
    assert store.feedback_for(["a"]) == [reviewed]
    with pytest.raises(NotFoundError):
        store.review_comparison(comparison_id, reviewer="x", status="rejected", owner="mallory")
    with pytest.raises(NotFoundError):
        store.review_comparison("nope", reviewer="x", status="rejected")
    with pytest.raises(InputError, match="status"):
        store.review_comparison(comparison_id, reviewer="x", status="maybe")
    assert store.feedback_for(["a"]) == [reviewed]


def test_the_owner_can_review_a_comparison_a_reimport_orphaned(store: Store) -> None:
    a, c = make_trace("a", turns=3), make_trace("c")
    store.import_traces([make_record(a), make_record(c)])
    last = a.actions()[-1].id  # a turn the shorter reimport below removes
    pending = replace(comparison(a, c), chosen_action_id=last,
                      rejected_action_id=c.actions()[0].id, status="pending", reviewer=None)
    store.add_feedback([pending], owner="local")
    store.import_traces([make_record(make_trace("a", turns=1))])
    assert store.orphaned_feedback(owner="local") == [pending]
    reviewed = store.review_comparison(pending.id, reviewer="bo", status="approved",
                                       owner="local")
    assert (reviewed.reviewer, reviewed.status) == ("bo", "approved")
    with pytest.raises(NotFoundError):
        store.review_comparison(pending.id, reviewer="x", status="rejected", owner="bo")
