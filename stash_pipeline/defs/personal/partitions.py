"""One partition per personal reward model, its key the model's name (a slug) and its id, so
Dagster's partition lists say which model each is: ``first-personal-model--<id>``."""

from __future__ import annotations

import re
import unicodedata
from typing import Protocol

import dagster as dg

personal_reward_model = dg.DynamicPartitionsDefinition(name="personal_reward_model")

# A run made for "Score again" carries the request's number; it rescores and trains nothing.
SCORE_AGAIN_TAG = "stash/score_again"

# Between the slug and the id. A slug never holds it (runs of other characters become one "-",
# trimmed at both ends), so the id is what follows its first occurrence, whatever the id holds.
KEY_SEPARATOR = "--"
SLUG_CHARS = 40
# Letters and digits of any script, and "_": never Dagster's invalid substrings ("...", control
# characters), its range and list syntax in partition selections ("[", "]", ","), a path's "/".
_NOT_SLUG = re.compile(r"[^\w]+")


class NamedModel(Protocol):
    id: str
    name: str


def model_partition_key(model: NamedModel) -> str:
    """The model's partition key: its name as a slug of at most SLUG_CHARS characters, then
    its id."""
    slug = _NOT_SLUG.sub("-", unicodedata.normalize("NFKC", model.name)).strip("-")
    slug = slug[:SLUG_CHARS].rstrip("-") or "model"
    return f"{slug}{KEY_SEPARATOR}{model.id}"


def model_id_of(partition_key: str) -> str:
    """The model id a partition key names; a bare id (the key before models were named) is the
    id itself."""
    _, separator, model_id = partition_key.partition(KEY_SEPARATOR)
    return model_id if separator else partition_key

# A training run names its model and attempt (its partition key also names the model: model_id_of).
MODEL_TAG = "stash/reward_model"
MODEL_NAME_TAG = "stash/reward_model_name"  # the whole name (a partition key has its slug)
ATTEMPT_TAG = "stash/attempt"
