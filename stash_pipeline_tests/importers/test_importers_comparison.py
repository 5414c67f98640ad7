"""The feedback list's `comparison` items: two actions of the trace, chosen over rejected."""

from __future__ import annotations

import pytest

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import ReviewedComparison, feedback_id
from stash_pipeline_tests.support.importer_helpers import read_all, write_json

MESSAGES = [{"role": "user", "content": "Move my flight."},
            {"role": "assistant", "content": "Done, moved.", "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "move", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": "Which time would you like?"}]


def one(tmp_path, *feedback):
    path = write_json(tmp_path, "t.json", {"id": "t1", "messages": MESSAGES,
                                           "feedback": list(feedback)})
    return read_all(path)[0]


def test_a_reviewed_comparison_of_two_actions(tmp_path):
    record = one(tmp_path, {"type": "comparison", "chosen": "m3", "rejected": "m1.call0",
                            "author": "ana", "reviewer": "lead", "status": "approved",
                            "rationale": "ask first"})
    [item] = record.feedback
    assert item == ReviewedComparison(
        feedback_id("comparison", "t1/m3", "t1/m1.call0", "ana"), "t1", "t1",
        chosen_action_id="t1/m3", rejected_action_id="t1/m1.call0", reviewer="lead",
        status="approved", rationale="ask first", author="ana")
    pending = one(tmp_path, {"type": "comparison", "chosen": "m3", "rejected": "m1"})
    assert pending.feedback[0].status == "pending" and pending.feedback[0].reviewer is None


@pytest.mark.parametrize("item, field, words", [
    ({"chosen": "m9", "rejected": "m1"}, "feedback[0].chosen", "'m9'"),
    ({"chosen": "m3", "rejected": None}, "feedback[0].rejected", "expected an action"),
    ({"chosen": "m3", "rejected": "m3"}, "feedback[0].rejected", "two different"),
    ({"chosen": "m3", "rejected": "m1", "status": "done"}, "feedback[0].status", "done"),
    ({"chosen": "m3", "rejected": "m1", "status": "approved"}, "feedback[0].reviewer",
     "needs its reviewer"),
    ({"chosen": "m3", "rejected": "m1", "action_id": "m3"}, "feedback[0]",
     "'chosen' and 'rejected'"),
])
def test_a_bad_comparison_names_its_field(tmp_path, item, field, words):
    with pytest.raises(InputError) as caught:
        one(tmp_path, {"type": "comparison", **item})
    assert caught.value.field == field and words in str(caught.value)
