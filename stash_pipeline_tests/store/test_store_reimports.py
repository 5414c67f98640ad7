"""Reimports that lose and mislabel nothing (issue 18).

An identical reimport changes nothing: same version, scores and scoring marks kept, counted
``unchanged``. A changed reimport orphans exactly the feedback on actions whose content (the action
and what its rendering reads before it) changed; feedback on unchanged actions stays attached.
"""

from __future__ import annotations

from dataclasses import replace

from stash_pipeline.core.feedback import Comment, Rating, ReviewedComparison, feedback_id
from stash_pipeline.core.traces import Message, ToolCall, Trace, action_messages
from stash_pipeline.extraction.config import ExtractionConfig
from stash_pipeline.pipelines.training_pairs import training_pairs
from stash_pipeline.store import ActionScore, Store, TraceScore
from stash_pipeline_tests.support.store_samples import feedback_on, make_record, make_trace


def test_an_identical_reimport_keeps_version_scores_and_marks(store: Store) -> None:
    trace = make_trace("t", turns=2)
    store.import_traces([make_record(trace, feedback=feedback_on(trace))])
    actions = [a.id for a in trace.actions()]
    store.save_action_scores("v1", {"t": 1}, [ActionScore(a, "t", 1, "v1", 0.5, 0.1)
                                               for a in actions])
    store.save_scores([TraceScore("t", 1, "rm-1", 2.0, 0.7)])
    before = store.list_traces(action_evaluator="v1")[0]

    summary = store.import_traces([make_record(trace, feedback=feedback_on(trace)),
                                   make_record(make_trace("new"))])

    assert (summary.imported, summary.updated, summary.unchanged) == (1, 0, 1)
    assert store.get_trace("t").version == 1
    assert store.scores_for("t") == [TraceScore("t", 1, "rm-1", 2.0, 0.7)]
    assert len(store.action_scores_for("t", "v1")) == len(actions)
    assert store.scored_version("t", "v1") == 1
    assert ("t", 1) not in store.traces_pending_scoring("v1")  # nothing queued again
    after = store.list_traces(action_evaluator="v1")[0]
    assert (after.version, after.latest_score, after.actions_scored, after.updated_at) == \
        (1, 2.0, len(actions), before.updated_at)
    assert store.orphaned_feedback() == []


def test_an_identical_reimport_with_contribute_opts_in_without_a_new_version(store: Store) -> None:
    store.import_traces([make_record(make_trace("t"))])
    summary = store.import_traces([make_record(make_trace("t", contribute=True))])
    trace = store.get_trace("t")
    assert (summary.unchanged, trace.version, trace.contribute) == (1, 1, True)


def test_a_changed_reimport_still_bumps_and_clears(store: Store) -> None:
    store.import_traces([make_record(make_trace("t"))])
    store.save_scores([TraceScore("t", 1, "rm-1", 2.0)])
    summary = store.import_traces([make_record(make_trace("t", text="edited"))])
    assert (summary.updated, summary.unchanged) == (1, 0)
    assert store.get_trace("t").version == 2 and store.scores_for("t") == []


def _with_call_arguments(trace: Trace, message_index: int, call: int, arguments: dict) -> Trace:
    messages = list(trace.messages)
    message = messages[message_index]
    calls = list(message.tool_calls)
    calls[call] = replace(calls[call], arguments=arguments)
    messages[message_index] = replace(message, tool_calls=tuple(calls))
    return trace.with_messages(tuple(messages))


def _rate(trace_id: str, action: str, value: float, author: str = "ana") -> Rating:
    return Rating(feedback_id("rating", trace_id, action, author), trace_id, value,
                  action_id=action, author=author)


def _changed_actions(old: Trace, new: Trace) -> set[str]:
    """Independently of the store's digests: actions whose rendered inputs differ."""
    before = {a.id: a for a in old.actions()}

    def seen(trace: Trace, action) -> tuple:
        return (trace.tools, repr(trace.evaluation_context),
                tuple((m.role, m.content, tuple((c.name, repr(c.arguments)) for c in m.tool_calls))
                      for m in action_messages(trace, action)))

    return {a.id for a in new.actions()
            if a.id not in before or seen(old, before[a.id]) != seen(new, a)}


def test_a_changed_action_orphans_exactly_its_own_feedback(store: Store, monkeypatch) -> None:
    monkeypatch.setenv("STASH_EXTRACTION", "off")
    old = make_trace("t", turns=2)
    store.import_traces([make_record(old)])
    # m2.call0 (+1) over m2.call1 (-1) and m5.call1 (-1); m5.call0 (+1) over the same two.
    given = [_rate("t", "t/m2.call0", 1.0), _rate("t", "t/m2.call1", -1.0),
             _rate("t", "t/m5.call0", 1.0), _rate("t", "t/m5.call1", -1.0),
             Comment("k-m5", "t", "Wrong user.", action_id="t/m5.call1"),
             ReviewedComparison("c-mixed", "t", "t", chosen_action_id="t/m2.call0",
                                rejected_action_id="t/m5.call1", reviewer="lead")]
    store.add_feedback(given, owner="local")
    new = _with_call_arguments(old, 5, 1, {"user_id": "someone else"})
    changed = _changed_actions(old, new)
    assert changed == {"t/m5.call1", "t/m8"}  # the call and the reply that reads it

    summary = store.import_traces([make_record(new)])

    assert summary.updated == 1
    on_changed = {f.id for f in given if any(
        getattr(f, name, None) in changed
        for name in ("action_id", "chosen_action_id", "rejected_action_id"))}
    assert on_changed == {_rate("t", "t/m5.call1", -1).id, "k-m5", "c-mixed"}
    assert {f.id for f in store.orphaned_feedback()} == on_changed
    assert {f.id for f in store.orphaned_feedback("local")} == on_changed
    stored = store.feedback_for(["t"])
    assert len(stored) == len(given)  # kept
    assert {f.id for f in stored if f.detached} == on_changed

    built = training_pairs(store.get_traces(["t"]), stored, extract=False,
                           config=ExtractionConfig.from_env())
    assert built.report["orphaned_feedback"] == 3
    # Only the unchanged actions' ratings make pairs: +1s over m2.call1.
    assert sorted((p.chosen.action_id, p.rejected.action_id) for p in built.pairs) == [
        ("t/m2.call0", "t/m2.call1"), ("t/m5.call0", "t/m2.call1")]
    for pair in built.pairs:  # no side with new content carries old feedback
        assert pair.chosen.action_id not in changed and pair.rejected.action_id not in changed


def test_feedback_given_on_the_new_content_is_attached(store: Store) -> None:
    old = make_trace("t", turns=2)
    store.import_traces([make_record(old)])
    store.add_feedback([_rate("t", "t/m8", -1.0)], owner="local")
    store.import_traces([make_record(replace(old, messages=old.messages[:-1] + (
        Message("assistant", "A helpful reply."),)))])
    assert [f.id for f in store.orphaned_feedback()] == [_rate("t", "t/m8", -1).id]
    # Rated again by the same person (same id) and by another: both about the new reply.
    store.add_feedback([_rate("t", "t/m8", 1.0), _rate("t", "t/m8", 1.0, "bo")], owner="local")
    assert store.orphaned_feedback() == []
    assert not any(f.detached for f in store.feedback_for(["t"]))


def test_feedback_in_the_reimported_record_describes_its_new_content(store: Store) -> None:
    old = make_trace("t", turns=1)
    store.import_traces([make_record(old, feedback=[_rate("t", "t/m2.call0", 1.0)])])
    new = _with_call_arguments(old, 2, 0, {"zeta": 9})
    store.import_traces([make_record(new, feedback=[_rate("t", "t/m2.call0", 1.0)])])
    assert store.orphaned_feedback() == []
    store.import_traces([make_record(_with_call_arguments(new, 2, 0, {"zeta": 10}))])
    assert [f.id for f in store.orphaned_feedback()] == [_rate("t", "t/m2.call0", 1).id]


def test_changing_a_tool_call_keeps_earlier_actions_attached(store: Store) -> None:
    old = make_trace("t", turns=2)
    store.import_traces([make_record(old)])
    store.add_feedback([_rate("t", "t/m2", 1.0), _rate("t", "t/m5.call0", -1.0)],
                       owner="local")
    messages = list(old.messages)
    messages[5] = replace(messages[5], tool_calls=(
        ToolCall("call-1", "cancel_reservation", {}), *messages[5].tool_calls[1:]))
    store.import_traces([make_record(old.with_messages(tuple(messages)))])
    assert [f.id for f in store.orphaned_feedback()] == [_rate("t", "t/m5.call0", -1).id]
