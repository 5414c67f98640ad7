"""A request for a personal reward model, validated once for the CLI and the HTTP API alike.

The seed's fields (``name``, ``trace_ids``, ``base_model``, ``epochs``, ``max_pairs``) with its
defaults; anything else, ``compute`` included (the deployment picks it), is refused naming the
field, which the API answers with 422. Ownership of the traces needs the store: ``services`` checks
it.

``REQUEST_FIELDS`` is the one table of the fields: the parser reads each field by its kind and
limit from it, and ``request_json_schema()`` writes the API's JSON Schema from it, so the
documented body and the accepted one cannot drift apart.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.training_settings import (
    DEFAULT_BASE_MODEL,
    DEFAULT_EPOCHS,
    DEFAULT_MAX_PAIRS,
)
from stash_pipeline.core.validation import MAX_ID_CHARS, MAX_NAME_CHARS, check_text

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
class RequestField:
    """One field of the request: how it is read and documented.

    ``kind``: ``text`` (a string with something besides whitespace, at most ``limit`` characters),
    ``integer`` (a JSON integer from 1 to ``limit``; 2.0 and booleans are refused) or ``trace_ids``
    (1 to ``limit`` trace ids of 1 to ``MAX_TRACE_ID_LENGTH`` characters each). No ``default``:
    required.
    """

    name: str
    kind: str
    limit: int
    description: str
    default: Any = None

    @property
    def required(self) -> bool:
        return self.default is None


REQUEST_FIELDS: tuple[RequestField, ...] = (
    RequestField("name", "text", MAX_NAME_LENGTH, "Display name."),
    RequestField("trace_ids", "trace_ids", MAX_TRACE_IDS,
                 "At least one trace UUID owned by you. Only these traces supply training "
                 "pairs. A repeated id selects its trace once."),
    RequestField("base_model", "text", MAX_BASE_MODEL_LENGTH,
                 "Hugging Face model id to fine-tune (a local path only inside the directories "
                 f"{BASE_MODEL_DIRS_ENV} lists).", DEFAULT_BASE_MODEL),
    RequestField("epochs", "integer", MAX_EPOCHS, "Passes over the training pairs.",
                 DEFAULT_EPOCHS),
    RequestField("max_pairs", "integer", MAX_MAX_PAIRS,
                 "Cap on combined API-rating and feedback-derived pairs.", DEFAULT_MAX_PAIRS),
)
FIELD_NAMES = tuple(f.name for f in REQUEST_FIELDS)
_FIELDS = {f.name: f for f in REQUEST_FIELDS}


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


def _read(data: Mapping[str, Any], spec: RequestField) -> Any:
    """The field's value, read by its kind from the table."""
    return {"text": _text, "integer": _integer, "trace_ids": _trace_ids}[spec.kind](data, spec)


def _text(data: Mapping[str, Any], spec: RequestField) -> str:
    field, limit = spec.name, spec.limit
    value = data.get(field, spec.default)
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


def _integer(data: Mapping[str, Any], spec: RequestField) -> int:
    field, largest = spec.name, spec.limit
    value = data.get(field, spec.default)
    # JSON true/false are not integers, and 2.0 is not one either: refuse rather than guess.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(field, f"expected an integer, got {value!r}")
    if not 1 <= value <= largest:
        raise _fail(field, f"expected an integer from 1 to {largest}, got {value}")
    return value


def _trace_ids(data: Mapping[str, Any], spec: RequestField) -> tuple[str, ...]:
    value = data.get(spec.name)
    if value is None:
        raise _fail("trace_ids", "is required: at least one trace id you own")
    if not isinstance(value, (list, tuple)):
        raise _fail("trace_ids", f"expected a list of trace ids, got {type(value).__name__}")
    if not value:
        raise _fail("trace_ids", "needs at least one trace id you own")
    if len(value) > spec.limit:
        raise _fail("trace_ids", f"lists {len(value)} traces; at most {spec.limit} are allowed")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item or len(item) > MAX_TRACE_ID_LENGTH:
            raise _fail(f"trace_ids[{index}]",
                        f"expected a trace id of 1 to {MAX_TRACE_ID_LENGTH} characters, "
                        f"got {item!r}")
        _storable(item, f"trace_ids[{index}]")
    return tuple(dict.fromkeys(value))  # a repeated id selects its trace once


def base_model_dirs(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``STASH_BASE_MODEL_DIRS``: directories (``os.pathsep``-separated) whose models API callers
    may name by path; none by default."""
    environ = os.environ if environ is None else environ
    return tuple(d for d in (environ.get(BASE_MODEL_DIRS_ENV) or "").split(os.pathsep) if d)


def local_model_path(value: str) -> str:
    """A base model named by a local path that exists, made absolute against the working
    directory (the worker starts in its job directory, where a relative path means nothing); a
    Hugging Face id, or any other name, as it is."""
    return os.path.abspath(value) if os.path.exists(value) else value


def check_base_model(value: str, local_dirs: Sequence[str] | None) -> str:
    """``value`` if it is a Hugging Face id, or a local path inside one of ``local_dirs``
    (``None``: any local path, for the deployment's owner on the CLI, made absolute). The message
    names neither the directories nor what the path resolves to."""
    if local_dirs is None:
        return local_model_path(value)
    if _hf_id(value):
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
        if field not in _FIELDS:
            raise _fail(str(field), f"unknown field; a request has {', '.join(FIELD_NAMES)}")
    values = {}
    for spec in REQUEST_FIELDS:  # in the table's order: the first wrong field is named
        values[spec.name] = _read(data, spec)
        if spec.name == "base_model":
            values[spec.name] = check_base_model(values[spec.name], local_dirs)
    return RewardModelRequest(**values)


def request_json_schema() -> dict[str, Any]:
    """The request's JSON Schema (the API documents its body with it), written from
    ``REQUEST_FIELDS``. It states what JSON Schema can; the parser alone also refuses a float
    with no fraction for an integer (JSON Schema counts 2.0 as one), NUL and lone surrogates in
    text, and a ``base_model`` that is neither a Hugging Face id nor an allowed local path."""
    def schema(spec: RequestField) -> dict[str, Any]:
        if spec.kind == "text":
            # \S: something besides whitespace, as the parser asks.
            out: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": spec.limit,
                                   "pattern": r"\S"}
        elif spec.kind == "integer":
            out = {"type": "integer", "minimum": 1, "maximum": spec.limit}
        else:
            out = {"type": "array", "minItems": 1, "maxItems": spec.limit,
                   "items": {"type": "string", "minLength": 1,
                             "maxLength": MAX_TRACE_ID_LENGTH}}
        if not spec.required:
            out["default"] = spec.default
        return {**out, "description": spec.description}

    return {"type": "object", "additionalProperties": False,
            "required": [spec.name for spec in REQUEST_FIELDS if spec.required],
            "properties": {spec.name: schema(spec) for spec in REQUEST_FIELDS}}


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
        else local_model_path(_text(data, _FIELDS["base_model"])),
        epochs=None if data.get("epochs") is None else _integer(data, _FIELDS["epochs"]))
