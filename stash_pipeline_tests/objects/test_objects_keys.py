from __future__ import annotations

import pytest

from stash_pipeline.objects import (
    ObjectLocationError,
    reward_model_checkpoint_key,
    shared_evaluator_checkpoint_key,
    validate_key,
)
from stash_pipeline.objects.keys import result_key


def test_checkpoint_key_layout() -> None:
    model_id = "3f0c8a5e-9d1b-4f7e-8a2c-5b6d7e8f9a0b"
    assert reward_model_checkpoint_key(model_id, 2) == \
        f"reward-models/{model_id}/2/reward-model.tar.gz"
    assert reward_model_checkpoint_key(model_id, "run-7c1d") == \
        f"reward-models/{model_id}/run-7c1d/reward-model.tar.gz"
    assert shared_evaluator_checkpoint_key("2026.11.30-1") == \
        "shared-evaluator/2026.11.30-1/reward-model.tar.gz"


def test_a_jobs_results_lie_beside_its_checkpoint() -> None:
    checkpoint = reward_model_checkpoint_key("m1", "attempt-2")
    assert result_key(checkpoint, "metrics.json") == \
        "reward-models/m1/attempt-2/results/metrics.json"
    assert result_key(shared_evaluator_checkpoint_key("v1"), "scores.jsonl") == \
        "shared-evaluator/v1/results/scores.jsonl"
    with pytest.raises(ObjectLocationError, match="result file name"):
        result_key(checkpoint, "../metrics.json")


@pytest.mark.parametrize("bad", ["..", "a/b", "", ".hidden", "x y", "/abs"])
def test_layout_refuses_parts_that_would_add_or_escape_segments(bad: str) -> None:
    with pytest.raises(ObjectLocationError, match="must start with a letter or digit"):
        reward_model_checkpoint_key(bad, 1)
    with pytest.raises(ObjectLocationError, match="attempt"):
        reward_model_checkpoint_key("m1", bad)
    with pytest.raises(ObjectLocationError, match="release version"):
        shared_evaluator_checkpoint_key(bad)


@pytest.mark.parametrize("key, reason", [
    ("../outside", "leave the store's root"),
    ("a/../../outside", "leave the store's root"),
    ("a/./b", "leave the store's root"),
    ("a//b", "leave the store's root"),
    ("a/", "leave the store's root"),
    ("/etc/passwd", "must be relative"),
    ("", "non-empty"),
    ("a/.partial", "must start with a letter or digit"),
    ("a\\..\\b", "must start with a letter or digit"),
    ("a/b c", "must start with a letter or digit"),
    ("a/b?c", "must start with a letter or digit"),
    ("a" * 1025, "longer than 1024"),
])
def test_keys_that_escape_or_need_quoting_are_refused(key: str, reason: str) -> None:
    with pytest.raises(ObjectLocationError, match=reason):
        validate_key(key)


def test_valid_keys_pass_unchanged() -> None:
    assert validate_key("reward-models/m1/1/reward-model.tar.gz") == \
        "reward-models/m1/1/reward-model.tar.gz"
    assert validate_key("x..y/1.2_3-4") == "x..y/1.2_3-4"
