"""A personal model's partition key names the model (a slug of its name) before its id; the id
comes back from the key, and from the bare-id keys of runs from before keys named models."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import dagster as dg
import pytest
from dagster._core.definitions.partitions.utils.base import INVALID_PARTITION_SUBSTRINGS

from stash_pipeline.defs.personal.partitions import (
    SLUG_CHARS,
    model_id_of,
    model_partition_key,
    personal_reward_model,
)

NAMES = {
    "first personal model": "first-personal-model",
    "Modèle français": "Modèle-français",
    "客服模型 v2": "客服模型-v2",
    "Cafe\u0301": "Caf\u00e9",  # a decomposed é (e + U+0301) composed first (NFKC)
    "ﬁne-tuned²": "fine-tuned2",  # compatibility characters as their plain forms
    "support/retail/refunds": "support-retail-refunds",
    "a,b,c": "a-b-c",
    "[2026-01-01...2026-02-01]": "2026-01-01-2026-02-01",
    "wait…": "wait",  # one character, "..." under NFKC
    "tabs\tand\nnewlines\0nul": "tabs-and-newlines-nul",
    "--a--b--": "a-b",
    "a | b": "a-b",
    "snake_case_name": "snake_case_name",
    "🚀🚀": "model",  # nothing left of it: a fixed word
    "": "model",
    "x" * 500: "x" * SLUG_CHARS,
    "y" * (SLUG_CHARS - 1) + " tail": "y" * (SLUG_CHARS - 1),  # no "-" left at the cut
}


@pytest.mark.parametrize("name", list(NAMES), ids=range(len(NAMES)))
def test_a_key_names_the_model_and_gives_its_id_back(name):
    model = SimpleNamespace(id=str(uuid.uuid4()), name=name)
    key = model_partition_key(model)
    assert key == f"{NAMES[name]}--{model.id}"
    assert model_id_of(key) == model.id
    assert not any(bad in key for bad in INVALID_PARTITION_SUBSTRINGS)
    assert not set(key) & set(",[]|/ ")  # Dagster's selection syntax, paths, spaces
    assert len(key) <= SLUG_CHARS + 2 + len(model.id)


def test_an_id_with_the_separator_in_it_still_comes_back():
    model = SimpleNamespace(id="sample--model--7", name="a--b")
    assert model_id_of(model_partition_key(model)) == "sample--model--7"


def test_an_old_bare_id_key_is_the_id():
    model_id = str(uuid.uuid4())
    assert model_id_of(model_id) == model_id


def test_dagster_takes_the_keys():
    keys = [model_partition_key(SimpleNamespace(id=str(uuid.uuid4()), name=name))
            for name in NAMES]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(personal_reward_model.name, keys)
        assert set(instance.get_dynamic_partitions(personal_reward_model.name)) == set(keys)
