"""Two accounts for the isolation tests: the victim (`ana`, with a trace, a model, scores and a
release's credit) and `mallory`, who tries to reach them; the SQL suites' `answer` of a query and
the victim's `secrets`."""

from __future__ import annotations

import httpx
import pytest

from stash_pipeline.services import trust as trust_service
from stash_pipeline.store import ActionScore, Release, TraceScore
from stash_pipeline_tests.support.api_helpers import Api, import_traces, succeed

RM = "/api/v1/rm/reward-models"
SQL = "/api/v1/sql"


@pytest.fixture
def victim(api: Api, tmp_path) -> dict:
    owner, client = api.account("ana")
    import_traces(client, "secret-trace")
    model = client.post(RM, json={"name": "secret-model", "trace_ids": ["secret-trace"]}).json()
    succeed(api.store, api.objects, model["id"], tmp_path)
    api.store.save_scores([TraceScore("secret-trace", 1, model["id"], 9.0)])
    api.store.save_release(Release("v1", "file:///x", {}, {}))
    client.post("/api/v1/traces/secret-trace/outcomes", json={"reward": 1})
    for evaluator in (model["id"], "v1"):  # trust reports: rows of the trust_figures view
        trust_service.report(api.store, owner, evaluator)
    saved = client.post("/api/v1/saved-filters", json={"name": "secret search",
                                                         "match": {"q": "secret"}}).json()
    return {"owner": owner, "client": client, "model": model["id"], "saved": saved["id"]}


@pytest.fixture
def mallory(api: Api) -> httpx.Client:
    _, client = api.account("mallory")
    import_traces(client, "mallory-trace")
    return client


def answer(client: httpx.Client, query: str) -> tuple[int, str]:
    """The query's answer (the test servers' statement timeout is one load never reaches, so a
    timeout here is a failure, not an answer)."""
    response = client.post(SQL, json={"sql": query})
    assert response.status_code in (200, 422), (query, response.text)
    assert response.json().get("code") != "timeout", (query, response.text)
    return response.status_code, response.text


@pytest.fixture
def secrets(api: Api, victim: dict) -> dict:
    trace = api.store.get_trace("secret-trace")
    action = trace.actions()[0]
    api.store.save_action_scores("v1", {"secret-trace": 1},
                                 [ActionScore(action.id, "secret-trace", 1, "v1", 9.0, 0.9)])
    return {"trace": "secret-trace", "action": action.id, "model": victim["model"]}
