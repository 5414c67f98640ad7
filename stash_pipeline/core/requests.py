"""A request for a personal reward model, validated once for the CLI and the HTTP API alike.

The seed's fields (``name``, ``trace_ids``, ``base_model``, ``epochs``, ``max_pairs``) with its
defaults; anything else, ``compute`` included (the deployment picks it), is refused naming the field,
which the API answers with 422. Ownership of the traces needs the store: ``services`` checks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.validation import MAX_ID_CHARS, MAX_NAME_CHARS, check_text
from stash_pipeline.core.training_settings import (
    DEFAULT_BASE_MODEL, DEFAULT_EPOCHS, DEFAULT_MAX_PAIRS,
)

REQUEST_FIELDS = ("name", "trace_ids", "base_model", "epochs", "max_pairs")
MAX_NAME_LENGTH = MAX_NAME_CHARS  # reward_models.name
MAX_BASE_MODEL_LENGTH = 512  # reward_models.base_model
MAX_TRACE_ID_LENGTH = MAX_ID_CHARS  # traces.id
# Bounds that keep one request from holding the worker for days: 4000 pairs of one epoch is the
# seed's default job; these are far above it and far below what would never finish.
MAX_EPOCHS = 100
MAX_MAX_PAIRS = 1_000_000
MAX_TRACE_IDS = 100_000


@dataclass(frozen=True)
class RewardModelRequest:
    name: str
    trace_ids: tuple[str, ...]
    base_model: str = DEFAULT_BASE_MODEL
    epochs: int = DEFAULT_EPOCHS
    max_pairs: int = DEFAULT_MAX_PAIRS

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["trace_ids"] = list(self.trace_ids)
        return data


def _fail(field: str, message: str) -> InputError:
    return InputError(message, record="request", field=field)


def _text(data: Mapping[str, Any], field: str, limit: int, default: str | None = None) -> str:
    value = data.get(field, default)
    if value is None:
        raise _fail(field, "is required")
    if not isinstance(value, str) or not value.strip():
        raise _fail(field, f"expected a non-empty string, got {value!r}")
    if len(value) > limit:
        raise _fail(field, f"is {len(value)} characters long; at most {limit} are allowed")
    _storable(value, field)
    return value


def _storable(value: str, field: str) -> None:
    """No NUL or lone surrogate: what neither database stores (core.validation's one check)."""
    try:
        check_text(value, field)
    except InputError as error:
        raise error.located(record="request") from None


def _integer(data: Mapping[str, Any], field: str, default: int, largest: int) -> int:
    value = data.get(field, default)
    # JSON true/false are not integers, and 2.0 is not one either: refuse rather than guess.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(field, f"expected an integer, got {value!r}")
    if not 1 <= value <= largest:
        raise _fail(field, f"expected an integer from 1 to {largest}, got {value}")
    return value


def _trace_ids(data: Mapping[str, Any]) -> tuple[str, ...]:
    value = data.get("trace_ids")
    if value is None:
        raise _fail("trace_ids", "is required: at least one trace id you own")
    if not isinstance(value, (list, tuple)):
        raise _fail("trace_ids", f"expected a list of trace ids, got {type(value).__name__}")
    if not value:
        raise _fail("trace_ids", "needs at least one trace id you own")
    if len(value) > MAX_TRACE_IDS:
        raise _fail("trace_ids", f"lists {len(value)} traces; at most {MAX_TRACE_IDS} are allowed")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item or len(item) > MAX_TRACE_ID_LENGTH:
            raise _fail(f"trace_ids[{index}]",
                        f"expected a trace id of 1 to {MAX_TRACE_ID_LENGTH} characters, got {item!r}")
        _storable(item, f"trace_ids[{index}]")
    return tuple(dict.fromkeys(value))  # a repeated id selects its trace once


def parse_reward_model_request(data: Any) -> RewardModelRequest:
    """The validated request; InputError names the first wrong field."""
    if not isinstance(data, Mapping):
        raise InputError(f"expected a JSON object, got {type(data).__name__}", record="request")
    for field in data:
        if field == "compute":
            raise _fail("compute", "is chosen by the deployment (RM_COMPUTE), not by a request")
        if field not in REQUEST_FIELDS:
            raise _fail(str(field), f"unknown field; a request has {', '.join(REQUEST_FIELDS)}")
    return RewardModelRequest(
        name=_text(data, "name", MAX_NAME_LENGTH),
        trace_ids=_trace_ids(data),
        base_model=_text(data, "base_model", MAX_BASE_MODEL_LENGTH, DEFAULT_BASE_MODEL),
        epochs=_integer(data, "epochs", DEFAULT_EPOCHS, MAX_EPOCHS),
        max_pairs=_integer(data, "max_pairs", DEFAULT_MAX_PAIRS, MAX_MAX_PAIRS),
    )


@dataclass(frozen=True)
class SharedTrainingOptions:
    """`evaluator train`: both optional; None leaves the deployment's default."""

    base_model: str | None = None
    epochs: int | None = None


def parse_shared_training_request(data: Mapping[str, Any]) -> SharedTrainingOptions:
    """The same limits as a personal request's fields; InputError names the field."""
    unknown = sorted(set(data) - {"base_model", "epochs"})
    if unknown:
        raise _fail(unknown[0], "unknown field")
    return SharedTrainingOptions(
        base_model=None if data.get("base_model") is None
        else _text(data, "base_model", MAX_BASE_MODEL_LENGTH),
        epochs=None if data.get("epochs") is None
        else _integer(data, "epochs", DEFAULT_EPOCHS, MAX_EPOCHS))
