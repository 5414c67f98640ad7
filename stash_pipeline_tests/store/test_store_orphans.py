"""Orphaned feedback: on actions that a shorter reimport removed. Kept, listed, removable, left
out of pairs and counted; pair building and `pairs preview --all-traces` never fail on it.

Before: pair building stopped with an InputError for good, with no command to remove it.
"""

from __future__ import annotations

import json

import pytest

from stash_pipeline.cli import main
from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.core.feedback import Comment, Rating, ReviewedComparison, feedback_id
from stash_pipeline.store import Store
from stash_pipeline_tests.support.store_samples import make_record, make_trace, preview_report

GONE = "t/m5.call0"  # an action of the two-turn trace that the one-turn trace does not have
KEPT = "t/m2.call0"


def on(action: str, value: float, author: str) -> Rating:
    return Rating(feedback_id("rating", "t", action, author), "t", value, action_id=action,
                  author=author)


@pytest.fixture
def reimported(store: Store) -> Store:
    """Trace t rated on four actions, compared and commented on; then reimported shorter."""
    store.import_traces([make_record(make_trace("t", turns=2)),
                         make_record(make_trace("other", owner="bo"))])
    store.add_feedback([
        on(GONE, -1.0, "ana"), on("t/m8", 1.0, "ana"), on(KEPT, 1.0, "ana"),
        on("t/m2.call1", -1.0, "ana"),
        Comment("k-gone", "t", "Wrong tool.", action_id=GONE),
        ReviewedComparison("c-gone", "t", "t", chosen_action_id=KEPT, rejected_action_id=GONE,
                           reviewer="lead"),
    ], owner="local")
    store.import_traces([make_record(make_trace("t", turns=1))])
    return store


def orphan_ids(store: Store, owner: str | None = None) -> set[str]:
    return {item.id for item in store.orphaned_feedback(owner)}


def test_orphans_are_kept_listed_and_left_out_of_pairs(reimported: Store, monkeypatch,
                                                       capsys) -> None:
    store = reimported
    expected = {on(GONE, -1, "ana").id, on("t/m8", 1, "ana").id, "k-gone", "c-gone"}
    assert orphan_ids(store) == expected
    assert orphan_ids(store, "local") == expected and orphan_ids(store, "bo") == set()
    assert len(store.feedback_for(["t"])) == 6  # nothing was deleted
    report = preview_report(store, monkeypatch, capsys, "t")
    assert report["orphaned_feedback"] == 4
    assert report["by_source"]["step_rating"] == 1  # m2.call0 over m2.call1 only
    assert report["pending_extraction"]["comment"] == 0  # the orphaned comment is not read


def test_the_cli_lists_removes_and_previews(reimported: Store, monkeypatch, capsys) -> None:
    store = reimported
    monkeypatch.setenv("DATABASE_URL", store.url)

    def last_json(*argv: str) -> dict:
        assert main([*argv, "--json"]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    listed = last_json("feedback", "orphaned", "--owner", "local")
    assert listed["count"] == 4
    assert {row["kind"] for row in listed["orphaned_feedback"]} == {
        "Rating", "Comment", "ReviewedComparison"}
    assert last_json("feedback", "orphaned", "--owner", "bo")["count"] == 0
    assert last_json("pairs", "preview", "--all-traces")["orphaned_feedback"] == 4
    assert main(["pairs", "preview", "--all-traces"]) == 0
    assert "4 orphaned feedback item(s)" in capsys.readouterr().out

    ids = [row["id"] for row in listed["orphaned_feedback"]]
    # Another account cannot remove them, and an unknown id removes nothing.
    assert main(["feedback", "remove", *ids, "--owner", "bo"]) == 2
    assert "nothing was removed" in capsys.readouterr().err
    assert main(["feedback", "remove", ids[0], "no-such-id"]) == 2
    capsys.readouterr()
    assert len(orphan_ids(store)) == 4
    assert last_json("feedback", "remove", *ids) == {"removed": 4}
    assert last_json("feedback", "orphaned")["count"] == 0
    assert last_json("pairs", "preview", "--all-traces")["orphaned_feedback"] == 0
    assert len(store.feedback_for(["t"])) == 2

    assert main(["feedback", "orphaned"]) == 0
    assert "0 orphaned feedback item(s)" in capsys.readouterr().out


def test_a_repeated_id_with_a_shorter_second_copy_orphans_the_first_copys_feedback(
        store: Store, monkeypatch, capsys) -> None:
    long, short = make_trace("t", turns=2), make_trace("t", turns=1)
    store.import_traces([make_record(long, feedback=[on(GONE, -1.0, "a"), on(KEPT, 1.0, "a")]),
                         make_record(short)])
    assert store.get_trace("t").version == 2
    assert orphan_ids(store) == {on(GONE, -1.0, "a").id}
    report = preview_report(store, monkeypatch, capsys)
    assert report["orphaned_feedback"] == 1 and report["error"]  # one usable rating: no pair


def test_a_reimport_that_brings_the_action_back_adopts_its_feedback(reimported: Store) -> None:
    reimported.import_traces([make_record(make_trace("t", turns=2))])
    assert orphan_ids(reimported) == set()


def test_removing_feedback_needs_the_owner_of_every_trace_it_names(store: Store) -> None:
    store.import_traces([make_record(make_trace("a")), make_record(make_trace("b", owner="bo"))])
    store.add_feedback([ReviewedComparison("c", "a", "b", reviewer="lead")])
    with pytest.raises(NotFoundError):
        store.remove_feedback(["c"], owner="local")
    assert store.remove_feedback(["c"]) == 1
