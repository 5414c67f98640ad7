"""A request for a personal reward model, validated once for the CLI and the HTTP API alike.

The seed's fields (``name``, ``trace_ids``, ``base_model``, ``epochs``, ``max_pairs``) with its
defaults; anything else, ``compute`` included (the deployment picks it), is refused naming the field,
which the API answers with 422. Ownership of the traces needs the store: ``services`` checks it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
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
# A Hugging Face model id: ``name`` or ``namespace/name`` of letters, digits, ``-``, ``_``, ``.``
# (no ``..`` or ``--``; at most 96 characters each), as the hub allows.
HF_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")
BASE_MODEL_DIRS_ENV = "STASH_BASE_MODEL_DIRS"


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


def base_model_dirs(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``STASH_BASE_MODEL_DIRS``: directories (``os.pathsep``-separated) whose models API callers
    may name by path; none by default."""
    environ = os.environ if environ is None else environ
    return tuple(d for d in (environ.get(BASE_MODEL_DIRS_ENV) or "").split(os.pathsep) if d)


def check_base_model(value: str, local_dirs: Sequence[str] | None) -> str:
    """``value`` if it is a Hugging Face id, or a local path inside one of ``local_dirs``
    (``None``: any local path, for the deployment's owner on the CLI). The message names neither
    the directories nor what the path resolves to."""
    if local_dirs is None or _hf_id(value):
        return value
    if os.path.isabs(value):
        real = os.path.realpath(value)  # symlinks followed: a link out of a directory is outside
        for directory in local_dirs:
            root = os.path.realpath(directory)
            if os.path.commonpath([real, root]) == root:
                return value
    raise _fail("base_model", "expected a Hugging Face model id such as Qwen/Qwen3-0.6B; a local "
                              f"path is allowed only inside the directories {BASE_MODEL_DIRS_ENV} "
                              "lists")


def _hf_id(value: str) -> bool:
    return (HF_MODEL_ID.fullmatch(value) is not None and ".." not in value and "--" not in value
            and not value.endswith(".git"))


def parse_reward_model_request(data: Any, *, local_dirs: Sequence[str] | None = None
                               ) -> RewardModelRequest:
    """The validated request; InputError names the first wrong field. ``local_dirs``: where a
    local ``base_model`` may be (``None``: anywhere, the deployment's owner; the API passes
    ``STASH_BASE_MODEL_DIRS``, empty by default: a Hugging Face id only)."""
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
        base_model=check_base_model(
            _text(data, "base_model", MAX_BASE_MODEL_LENGTH, DEFAULT_BASE_MODEL), local_dirs),
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
