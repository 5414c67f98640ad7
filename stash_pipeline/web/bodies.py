"""Request bodies read as JSON under a nesting limit, then validated into typed models.

A body is parsed only after its nesting is checked on the raw bytes (``MAX_BODY_DEPTH``): a deeply
nested array would otherwise reach Python's recursion limit in the parser or in the code that
walks the value (a 500). Either refusal is a 422 naming ``body``; a model's own refusals name the
field, in the shape of FastAPI's validation errors (``errors.validation_error``).
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.validation import MAX_JSON_DEPTH
from stash_pipeline.importers.limits import JsonRefused, check_nesting

# Deeper than any body a route reads (a conversation nests at most MAX_JSON_DEPTH levels in its
# metadata, tools and arguments, inside a few levels of envelope), far below the recursion limit.
MAX_BODY_DEPTH = MAX_JSON_DEPTH + 28
Model = TypeVar("Model", bound=BaseModel)


def json_value(body: bytes) -> Any:
    """The JSON value of ``body``: InputError (422, field ``body``) when it is not JSON or nests
    deeper than ``MAX_BODY_DEPTH``."""
    try:
        check_nesting(body, MAX_BODY_DEPTH)
        return json.loads(body)
    except JsonRefused as error:
        raise InputError(f"the body is refused: {error}", field="body") from None
    except (ValueError, RecursionError) as error:
        raise InputError(f"the body is not JSON: {error}", field="body") from None


async def read_json(request: Request) -> Any:
    return json_value(await request.body())


def typed_body(model: type[Model]) -> Any:
    """A dependency giving the body validated as ``model``: a route takes
    ``body: Annotated[Model, typed_body(Model)]``."""
    async def read(request: Request) -> Model:
        try:
            return model.model_validate(await read_json(request))
        except ValidationError as error:
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])}
                                          for e in error.errors()]) from None
    return Depends(read)
