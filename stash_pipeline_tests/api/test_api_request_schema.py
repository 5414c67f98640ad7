"""The reward-model request's schema in the API's OpenAPI document is the one the parser's field
table writes (core.requests.request_json_schema), not a second copy."""

from __future__ import annotations

from stash_pipeline.api import create_app
from stash_pipeline.core.requests import FIELD_NAMES, request_json_schema


def test_the_api_documents_the_schema_written_from_the_parsers_fields():
    operation = create_app().openapi()["paths"]["/api/v1/rm/reward-models"]["post"]
    documented = dict(operation["requestBody"]["content"]["application/json"]["schema"])
    documented.pop("title", None)  # FastAPI names the body
    assert documented == request_json_schema()
    assert tuple(documented["properties"]) == FIELD_NAMES
    assert documented["required"] == ["name", "trace_ids"]
    assert documented["properties"]["max_pairs"]["default"] == 4000
