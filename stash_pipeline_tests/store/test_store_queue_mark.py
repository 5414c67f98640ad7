"""What `evaluator score-pending --wait` counts beside a daemon: the scoring queue's work queued
at or before a mark (the newest queued work when the command started), on both databases."""

from __future__ import annotations

from stash_pipeline.store import ActionScore, Release, Store
from stash_pipeline_tests.support.store_samples import make_record, make_trace


def test_the_work_queued_at_a_mark_counts_down_as_it_is_scored(store: Store) -> None:
    assert store.scoring_queue_mark() is None  # nothing queued
    store.import_traces([make_record(make_trace(t)) for t in ("a", "b")])
    store.save_release(Release("r1", "file:///r1.tar.gz", {"passed": True},
                               {"training_traces": {}}))
    mark = store.scoring_queue_mark()
    assert mark is not None and store.count_queued_until(mark) == 2
    scores = [ActionScore(a.id, "a", 1, "r1", 0.5, 0.1) for a in make_trace("a").actions()]
    store.save_action_scores("r1", {"a": 1}, scores)
    assert store.count_queued_until(mark) == 1
    assert store.scoring_queue_mark() <= mark
