"""The reward-model request: the seed's fields and defaults, every refusal naming its field."""

from __future__ import annotations

import pytest

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.requests import (
    MAX_BASE_MODEL_LENGTH,
    MAX_NAME_LENGTH,
    MAX_TRACE_ID_LENGTH,
    RewardModelRequest,
    parse_reward_model_request,
)


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


GOOD = {"name": "n", "trace_ids": ["t"]}
# Bodies both the parser and the API's JSON Schema take or both refuse (the API's parser: a
# Hugging Face id only, STASH_BASE_MODEL_DIRS unset).
AGREED = [
    (GOOD, True),
    ({**GOOD, "base_model": "Qwen/Qwen3-0.6B", "epochs": 100, "max_pairs": 1_000_000}, True),
    ({**GOOD, "trace_ids": ["a", "b", "a", "x" * MAX_TRACE_ID_LENGTH],
      "name": "n" * MAX_NAME_LENGTH}, True),
    ({"trace_ids": ["t"]}, False),
    ({"name": "n"}, False),
    ({**GOOD, "name": ""}, False),
    ({**GOOD, "name": "  "}, False),
    ({**GOOD, "name": "n" * (MAX_NAME_LENGTH + 1)}, False),
    ({**GOOD, "name": 7}, False),
    ({**GOOD, "trace_ids": []}, False),
    ({**GOOD, "trace_ids": "t1"}, False),
    ({**GOOD, "trace_ids": ["t", 7]}, False),
    ({**GOOD, "trace_ids": [""]}, False),
    ({**GOOD, "trace_ids": ["x" * (MAX_TRACE_ID_LENGTH + 1)]}, False),
    ({**GOOD, "epochs": 0}, False),
    ({**GOOD, "epochs": 101}, False),
    ({**GOOD, "epochs": True}, False),
    ({**GOOD, "epochs": 1.5}, False),
    ({**GOOD, "epochs": "2"}, False),
    ({**GOOD, "max_pairs": None}, False),
    ({**GOOD, "max_pairs": 1_000_001}, False),
    ({**GOOD, "base_model": ""}, False),
    ({**GOOD, "base_model": None}, False),
    ({**GOOD, "base_model": "m" * (MAX_BASE_MODEL_LENGTH + 1)}, False),
    ({**GOOD, "compute": "modal"}, False),
    ({**GOOD, "learning_rate": 0.1}, False),
]
# What only the parser refuses (request_json_schema's docstring): the schema takes them.
PARSER_ONLY = [
    {**GOOD, "epochs": 2.0},  # JSON Schema counts a float with no fraction as an integer
    {**GOOD, "name": "a\x00"},
    {**GOOD, "trace_ids": ["t\ud800"]},
    {**GOOD, "base_model": "/models/tiny"},  # a local path outside STASH_BASE_MODEL_DIRS
]


def parser_takes(body) -> bool:
    try:
        parse_reward_model_request(body, local_dirs=())
    except InputError:
        return False
    return True


@pytest.mark.parametrize(("body", "taken"), AGREED)
def test_the_json_schema_takes_what_the_parser_takes(body, taken):
    from jsonschema import Draft202012Validator

    from stash_pipeline.core.requests import request_json_schema

    schema = Draft202012Validator(request_json_schema())
    assert (parser_takes(body), schema.is_valid(body)) == (taken, taken)


@pytest.mark.parametrize("body", PARSER_ONLY)
def test_the_json_schema_is_never_stricter_than_the_parser(body):
    from jsonschema import Draft202012Validator

    from stash_pipeline.core.requests import request_json_schema

    assert Draft202012Validator(request_json_schema()).is_valid(body)
    assert not parser_takes(body)

