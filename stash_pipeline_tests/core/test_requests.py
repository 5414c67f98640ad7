"""The reward-model request: the seed's fields and defaults, every refusal naming its field."""

from __future__ import annotations

import pytest

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.requests import RewardModelRequest, parse_reward_model_request


def test_defaults_are_the_seeds():
    request = parse_reward_model_request({"name": "refund-policy-v2", "trace_ids": ["t1"]})
    assert request == RewardModelRequest("refund-policy-v2", ("t1",), "Qwen/Qwen3-0.6B", 1, 4000)


def test_every_field_is_taken_and_repeated_ids_count_once():
    request = parse_reward_model_request({
        "name": "n", "trace_ids": ["a", "b", "a"], "base_model": "/models/tiny", "epochs": 2,
        "max_pairs": 10})
    assert request.to_dict() == {"name": "n", "trace_ids": ["a", "b"], "base_model": "/models/tiny",
                                 "epochs": 2, "max_pairs": 10}


@pytest.mark.parametrize(("body", "field"), [
    ({"trace_ids": ["t"]}, "name"),
    ({"name": "  ", "trace_ids": ["t"]}, "name"),
    ({"name": "n" * 257, "trace_ids": ["t"]}, "name"),
    ({"name": "n"}, "trace_ids"),
    ({"name": "n", "trace_ids": []}, "trace_ids"),
    ({"name": "n", "trace_ids": "t1"}, "trace_ids"),
    ({"name": "n", "trace_ids": ["t", 7]}, "trace_ids[1]"),
    ({"name": "n", "trace_ids": [""]}, "trace_ids[0]"),
    ({"name": "n", "trace_ids": ["t"], "epochs": 0}, "epochs"),
    ({"name": "n", "trace_ids": ["t"], "epochs": True}, "epochs"),
    ({"name": "n", "trace_ids": ["t"], "epochs": 1.5}, "epochs"),
    ({"name": "n", "trace_ids": ["t"], "epochs": "2"}, "epochs"),
    ({"name": "n", "trace_ids": ["t"], "max_pairs": -5}, "max_pairs"),
    ({"name": "n", "trace_ids": ["t"], "max_pairs": None}, "max_pairs"),
    ({"name": "n", "trace_ids": ["t"], "base_model": ""}, "base_model"),
    # Neither database can store a NUL or a lone surrogate: refused here, on both alike.
    ({"name": "a\x00", "trace_ids": ["t"]}, "name"),
    ({"name": "x\udc80", "trace_ids": ["t"]}, "name"),
    ({"name": "n", "trace_ids": ["t\ud800"]}, "trace_ids[0]"),
    ({"name": "n", "trace_ids": ["t"], "base_model": "\ud800"}, "base_model"),
    ({"name": "n", "trace_ids": ["t"], "compute": "modal"}, "compute"),
    ({"name": "n", "trace_ids": ["t"], "learning_rate": 0.1}, "learning_rate"),
])
def test_refusals_name_the_field(body, field):
    with pytest.raises(InputError) as error:
        parse_reward_model_request(body)
    assert error.value.field == field


def test_compute_is_the_deployments_choice():
    with pytest.raises(InputError, match="RM_COMPUTE"):
        parse_reward_model_request({"name": "n", "trace_ids": ["t"], "compute": "local"})


def test_a_request_is_an_object():
    with pytest.raises(InputError, match="JSON object"):
        parse_reward_model_request(["name"])


def test_a_shared_training_request_keeps_defaults_and_the_same_limits():
    from stash_pipeline.core.requests import parse_shared_training_request

    assert parse_shared_training_request({}) == parse_shared_training_request(
        {"base_model": None, "epochs": None})
    wanted = parse_shared_training_request({"base_model": "/models/tiny", "epochs": 3})
    assert (wanted.base_model, wanted.epochs) == ("/models/tiny", 3)
    for body, field in (({"epochs": 0}, "epochs"), ({"epochs": 101}, "epochs"),
                        ({"base_model": " "}, "base_model"), ({"compute": "modal"}, "compute")):
        with pytest.raises(InputError) as refused:
            parse_shared_training_request(body)
        assert refused.value.field == field
