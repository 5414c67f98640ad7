from __future__ import annotations

import pytest

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import (
    Comment,
    Rating,
    ReviewedComparison,
    VerifiedOutcome,
    split_orphaned,
)
from stash_pipeline.core.pair_builders import AUDIENCE_SOURCES, build_feedback_pairs
from stash_pipeline.core.pairs import Pair, pair_context
from stash_pipeline.core.traces import Message
from stash_pipeline_tests.support.pair_fixtures import text_trace, tool_trace


def test_step_ratings_pair_every_higher_with_every_lower_action_of_a_trace():
    trace = tool_trace()
    ratings = [Rating("r1", "t1", 1, "m2.call0"), Rating("r2", "t1", -1, "m2.call1"),
               Rating("r3", "t1", 0, "m5"), Rating("r4", "t1", 0, "m7")]
    pairs = build_feedback_pairs([trace], ratings)
    summary = sorted((p.chosen.action_id, p.rejected.action_id) for p in pairs)
    assert summary == [("t1/m2.call0", "t1/m2.call1"), ("t1/m2.call0", "t1/m5"),
                       ("t1/m2.call0", "t1/m7"), ("t1/m5", "t1/m2.call1"),
                       ("t1/m7", "t1/m2.call1")]
    assert all(p.kind == "action" and p.source_kind == "step_rating" for p in pairs)
    assert all(p.source_trace_ids == ("t1",) for p in pairs)


def test_action_sides_are_the_trace_cut_right_after_the_action():
    trace = tool_trace()
    pairs = build_feedback_pairs([trace], [Rating("r1", "t1", 1, "m2.call1"),
                                           Rating("r2", "t1", 0, "m5")])
    (pair,) = pairs
    chosen = pair.chosen.trace.messages
    assert len(chosen) == 3 and [c.name for c in chosen[-1].tool_calls] == [
        "search_flights", "get_user"]
    assert pair.rejected.trace.messages == trace.messages[:6]
    assert pair.is_tool_call and pair.tool_name == "get_user"
    assert pair.slices == {"tool": "get_user", "domain": None, "agent": None}
    # The earlier action's context: its message's text and first call, nothing after.
    context = pair_context(pair)
    assert context[:2] == trace.messages[:2]
    assert context[2].content == "Let me look." and len(context[2].tool_calls) == 1


def test_mean_of_several_ratings_of_one_action_and_ties_give_no_pair():
    trace = tool_trace()
    ratings = [Rating("a", "t1", 1, "m5"), Rating("b", "t1", -1, "m5"),
               Rating("c", "t1", 0, "m7")]
    assert build_feedback_pairs([trace], ratings) == []


def test_feedback_on_an_action_the_trace_no_longer_has_is_orphaned_not_an_error():
    # After a shorter reimport, m9 is gone and m1 is a user message: neither is an action.
    trace = tool_trace()
    ratings = [Rating("r9", "t1", 1, "t1/m9"), Rating("r1", "t1", 1, "m1"),
               Rating("r2", "t1", 1, "m5"), Rating("r3", "t1", 0, "m7")]
    comparison = ReviewedComparison("c1", "t1", "t1", "t1/m9", "t1/m5")
    comment = Comment("k1", "t1", "gone", "t1/m9")
    usable, orphaned = split_orphaned([trace], [*ratings, comparison, comment])
    assert [f.id for f in orphaned] == ["r9", "r1", "c1", "k1"]
    assert [f.id for f in usable] == ["r2", "r3"]
    pairs = build_feedback_pairs([trace], [*ratings, comparison, comment])
    assert [(p.chosen.action_id, p.rejected.action_id) for p in pairs] == [("t1/m5", "t1/m7")]


def test_trace_ratings_pair_within_owner_and_task_else_agent():
    traces = [
        text_trace("a", metadata={"task_id": "T1"}, agent="x"),
        text_trace("b", metadata={"task_id": "T1"}, agent="y"),
        text_trace("c", metadata={"task_id": "T2"}, agent="x"),  # other task: no pair with a
        text_trace("d", agent="x"), text_trace("e", agent="x"),  # no task: same agent
        text_trace("f", agent="z"),
        text_trace("g", metadata={"task_id": "T1"}, owner="other"),  # other owner
    ]
    values = {"a": 5, "b": 3, "c": 1, "d": 2, "e": 4, "f": 0, "g": 1}
    ratings = [Rating(f"r{t}", t, v) for t, v in values.items()]
    pairs = build_feedback_pairs(traces, ratings)
    assert sorted((p.chosen.trace.id, p.rejected.trace.id) for p in pairs) == [
        ("a", "b"), ("e", "d")]
    assert all(p.kind == "trace" and p.source_kind == "trace_rating" for p in pairs)
    assert {p.source_trace_ids for p in pairs} == {("a", "b"), ("d", "e")}
    ab = next(p for p in pairs if p.chosen.trace.id == "a")
    assert ab.slices["agent"] is None  # cross-agent comparison belongs to no agent slice


def test_reviewed_comparisons_only_approved_and_as_given():
    t1, t2 = tool_trace("t1"), tool_trace("t2")
    feedback = [
        ReviewedComparison("c1", "t1", "t2", "m5", "m7", reviewer="r", rationale="clearer"),
        ReviewedComparison("c2", "t2", "t1"),
        ReviewedComparison("c3", "t1", "t2", status="pending"),
        ReviewedComparison("c4", "t1", "t2", status="rejected"),
    ]
    pairs = {p.source_id: p for p in build_feedback_pairs([t1, t2], feedback)}
    assert set(pairs) == {"c1", "c2"}
    assert pairs["c1"].kind == "action" and pairs["c1"].chosen.action_id == "t1/m5"
    assert pairs["c1"].rejected.action_id == "t2/m7" and pairs["c1"].rationale == "clearer"
    assert pairs["c2"].kind == "trace" and pairs["c2"].chosen.trace == t2
    with pytest.raises(InputError, match="rejected_action_id"):
        build_feedback_pairs([t1, t2], [ReviewedComparison("c5", "t1", "t2", "m5")])


def test_verified_outcomes_pair_success_over_failure_of_the_same_task():
    traces = [text_trace(i, metadata={"task_id": task}, domain=dom)
              for i, task, dom in [("s1", "1", "air"), ("s2", "1", "air"), ("f1", "1", "air"),
                                   ("f2", "1", "retail"), ("s3", "2", "air"),
                                   ("n1", None, "air")]]
    outcomes = [VerifiedOutcome(f"o{t.id}", t.id, 1.0 if t.id[0] == "s" else 0.0)
                for t in traces]
    pairs = build_feedback_pairs(traces, outcomes)
    assert sorted((p.chosen.trace.id, p.rejected.trace.id) for p in pairs) == [
        ("s1", "f1"), ("s2", "f1")]
    assert all(p.source_kind == "verified_outcome" for p in pairs)


def test_feedback_on_unselected_or_not_contributed_traces_gives_no_pair():
    t1 = tool_trace("t1", contribute=True)
    t2 = tool_trace("t2")
    feedback = [ReviewedComparison("c1", "t1", "t2"), ReviewedComparison("c2", "t1", "t3"),
                Rating("r1", "t1", 1, "m5"), Rating("r2", "t1", 0, "m7"),
                Rating("r3", "t2", 1, "m5"), Rating("r4", "t2", 0, "m7")]
    personal = build_feedback_pairs([t1, t2], feedback, "personal")
    assert sorted(p.source_id for p in personal) == ["c1", "r1>r2", "r3>r4"]
    shared = build_feedback_pairs([t1, t2], feedback, "shared")
    assert [p.source_id for p in shared] == ["r1>r2"]


def test_shared_audience_takes_only_independently_reviewed_comparisons():
    t1, t2 = tool_trace("t1", contribute=True), tool_trace("t2", contribute=True)

    def compared(cid, **fields):
        return ReviewedComparison(cid, "t1", "t2", "t1/m5", "t2/m7", **fields)

    feedback = [compared("independent", author="ana", reviewer="bo"),
                compared("self-approved", author="ana", reviewer="ana"),
                compared("no-author", reviewer="bo"),
                compared("pending", author="ana", reviewer="bo", status="pending"),
                compared("rejected", author="ana", reviewer="bo", status="rejected")]
    assert [p.source_id for p in build_feedback_pairs([t1, t2], feedback, "shared")] == [
        "independent"]
    # A personal model learns from every approved comparison of its owner.
    assert sorted(p.source_id for p in build_feedback_pairs([t1, t2], feedback)) == [
        "independent", "no-author", "self-approved"]


def test_shared_audience_never_learns_from_comments_trace_ratings_or_outcomes():
    t1 = tool_trace("t1", contribute=True, metadata={"task_id": "T"})
    t2 = tool_trace("t2", contribute=True, metadata={"task_id": "T"})
    feedback = [Comment("k1", "t1", "Booking first was wrong.", "t1/m7"),
                VerifiedOutcome("o1", "t1", 1.0), VerifiedOutcome("o2", "t2", 0.0),
                Rating("r1", "t1", 1), Rating("r2", "t2", 0)]
    assert {p.source_kind for p in build_feedback_pairs([t1, t2], feedback)} == {
        "verified_outcome", "trace_rating"}
    assert build_feedback_pairs([t1, t2], feedback, "shared") == []
    assert AUDIENCE_SOURCES["shared"] == ("step_rating", "correction", "reviewed_comparison")


def test_shared_audience_keeps_the_full_trace_and_drops_personal_only_sources():
    trace = tool_trace("t1", contribute=True, metadata={"task_id": "T"})
    other = text_trace("t2", contribute=True, metadata={"task_id": "T"})
    feedback = [Rating("r1", "t1", 1), Rating("r2", "t2", 0)]
    assert len(build_feedback_pairs([trace, other], feedback, "personal")) == 1
    assert build_feedback_pairs([trace, other], feedback, "shared") == []
    steps = build_feedback_pairs([trace], [Rating("a", "t1", 1, "m5"),
                                           Rating("b", "t1", 0, "m7")], "shared")
    assert steps[0].chosen.trace.messages[0] == Message("system", "You are a travel agent.")


@pytest.mark.parametrize("prediction", [
    0.93, {"trace_id": "t1", "action_id": "m5", "raw_reward": 2.0},
    ("t1", "m5", 0.4),
])
def test_evaluator_predictions_are_refused_as_labels(prediction):
    with pytest.raises(TypeError, match="not feedback"):
        build_feedback_pairs([tool_trace()], [Rating("r", "t1", 1, "m5"), prediction])


def test_comments_are_not_built_deterministically():
    pairs = build_feedback_pairs([tool_trace()], [Comment("k1", "t1", "bad", "m5")])
    assert pairs == []


def test_pairs_round_trip_through_their_dict_form():
    pairs = build_feedback_pairs([tool_trace()], [Rating("r1", "t1", 1, "m2.call0"),
                                                  Rating("r2", "t1", 0, "m5")])
    assert [Pair.from_dict(p.to_dict()) for p in pairs] == pairs


def test_trace_ratings_of_same_task_id_in_different_domains_are_not_paired():
    from stash_pipeline.core.pair_builders import trace_rating_pairs
    from stash_pipeline.core.traces import Trace

    def trace(tid, domain):
        return Trace(id=tid, messages=(Message("user", "q"), Message("assistant", "a")),
                     domain=domain, metadata={"task_id": "12"})

    traces = {t.id: t
              for t in (trace("a1", "airline"), trace("r1", "retail"), trace("a2", "airline"))}
    ratings = [Rating(f"r-{tid}", tid, value) for tid, value in (("a1", 1), ("r1", 0), ("a2", 0))]
    pairs = trace_rating_pairs(traces, ratings)
    assert [(p.chosen.trace.id, p.rejected.trace.id) for p in pairs] == [("a1", "a2")]
