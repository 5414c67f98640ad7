"""The seed's metrics table: every field, strict accuracy, and nulls where the seed says null."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stash_pipeline.worker.metrics import pairwise_accuracy, training_metrics


def test_accuracy_is_strict_and_null_without_pairs():
    assert pairwise_accuracy([(1.0, 0.0), (0.5, 0.5), (0.0, 1.0), (2.0, 1.0)]) == 0.5
    assert pairwise_accuracy([]) is None


def test_action_and_tool_slices(synthetic_pairs):
    actions = synthetic_pairs(0, 4)  # tool-call action comparisons
    text_action = replace(synthetic_pairs(4, 1)[0], is_tool_call=False, tool_name=None)
    whole = replace(synthetic_pairs(5, 1)[0], kind="trace", is_tool_call=False)
    eval_pairs = [actions[0], actions[1], text_action, whole]
    rewards = [(1.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0)]
    metrics = training_metrics(train_pairs=actions + [whole], eval_pairs=eval_pairs,
                               eval_rewards=rewards, excluded_cross_trace_pairs=2, final_loss=0.25,
                               epochs=1, device="cpu", seconds=1.5)
    assert metrics == {
        "num_pairs": 9, "train_pairs": 5, "eval_pairs": 4, "eval_accuracy": 0.5,
        "eval_unavailable_reason": None, "max_length": 1024, "chat_template": None,
        "action_scoring_version": 1, "action_train_pairs": 4,
        "action_eval_pairs": 3, "action_eval_accuracy": pytest.approx(2 / 3),
        "tool_eval_pairs": 2, "tool_eval_accuracy": 0.5,
        "excluded_cross_trace_pairs": 2, "final_loss": 0.25, "epochs": 1, "device": "cpu",
        "seconds": 1.5, "truncated_pairs": None,
        # Per slice for the trust report: the two pairs whose sides call the tool (the other two
        # are refusals whose stored slices name none), both wrong (one a tie).
        "eval_slices": [{"slice": "tool", "value": "search_direct_flight", "pairs": 2,
                         "correct": 0}],
    }


def test_nulls_without_held_out_or_action_pairs(synthetic_pairs):
    whole = [replace(p, kind="trace", is_tool_call=False) for p in synthetic_pairs(0, 3)]
    metrics = training_metrics(train_pairs=whole, eval_pairs=[], eval_rewards=[],
                               excluded_cross_trace_pairs=0, final_loss=0.6, epochs=2, device="cpu",
                               seconds=3.0)
    assert metrics["eval_accuracy"] is None and metrics["eval_pairs"] == 0
    assert metrics["num_pairs"] == 3
    assert metrics["eval_unavailable_reason"] == "the job was given no held-out pairs"
    one_trace = [replace(p, source_trace_ids=("s0",)) for p in whole]
    metrics = training_metrics(train_pairs=one_trace, eval_pairs=[], eval_rewards=[],
                               excluded_cross_trace_pairs=0, final_loss=0.6, epochs=2, device="cpu",
                               seconds=3.0)
    assert "one trace" in metrics["eval_unavailable_reason"]
    assert metrics["action_scoring_version"] is None and metrics["action_train_pairs"] == 0
    assert metrics["action_eval_accuracy"] is None and metrics["tool_eval_accuracy"] is None


def test_rewards_must_match_eval_pairs(synthetic_pairs):
    with pytest.raises(ValueError, match="eval rewards"):
        training_metrics(train_pairs=[], eval_pairs=synthetic_pairs(0, 2),
                         eval_rewards=[(1.0, 0.0)], excluded_cross_trace_pairs=0, final_loss=None,
                         epochs=1, device="cpu", seconds=0.0)
