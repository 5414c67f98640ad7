"""schemathesis against the generated OpenAPI schema: no input makes the API answer 5xx.

Every operation runs against a live server on both databases, with a valid key and a little data
(a trace and a queued model) so that some generated ids exist. The example count stays small:
the suite runs on two cores.
"""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from stash_pipeline.api import create_app
from stash_pipeline_tests.support.api_helpers import Api, import_traces

schema = schemathesis.openapi.from_dict(create_app().openapi())


@schemathesis.serializer("application/x-ndjson")
def ndjson(_context, value) -> bytes:
    """JSON Lines bodies for the import route: the generated string, as UTF-8."""
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


@pytest.fixture
def seeded(api: Api) -> tuple[Api, str]:
    _, client = api.account("ana")
    import_traces(client, "t1")
    client.post("/api/v1/rm/reward-models", json={"name": "m", "trace_ids": ["t1"]})
    return api, client.headers["Authorization"]


@schema.parametrize()
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_no_input_makes_a_server_error(case, seeded) -> None:
    api, authorization = seeded
    response = case.call(base_url=api.url, headers={"Authorization": authorization})
    assert response.status_code < 500, (case.method, case.path, response.status_code,
                                        response.text[:500])


def test_docs_and_schema_are_served(api: Api) -> None:
    assert httpx.get(f"{api.url}/openapi.json").json()["paths"]["/api/v1/sql"]
    assert "swagger" in httpx.get(f"{api.url}/docs").text.lower()
