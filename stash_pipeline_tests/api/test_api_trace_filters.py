"""GET /api/v1/traces filters by agent, domain and scoring state, and sorts by every column."""

from __future__ import annotations

from pathlib import Path

from stash_pipeline.core.feedback import VerifiedOutcome
from stash_pipeline_tests.support.api_helpers import Api
from stash_pipeline_tests.support.viewer_helpers import TRACES, scored_world


def ids(response) -> list[str]:
    assert response.status_code == 200, response.text
    return [t["id"] for t in response.json()["traces"]]


def test_filters_and_sorts(api: Api, tmp_path: Path) -> None:
    world = scored_world(api, tmp_path)
    client = api.client(world.alice_key)
    alice = next(a for a in api.store.list_accounts() if a.name == "alice")
    api.store.add_feedback([VerifiedOutcome("o1", "trace-b", 0.25),
                            VerifiedOutcome("o2", "trace-a", 1.0)], owner=alice.id)
    assert ids(client.get("/api/v1/traces", params={"sort": "-outcome"})) == [
        "trace-a", "trace-b", "trace-c"]  # without an outcome: last
    assert ids(client.get("/api/v1/traces", params={"sort": "outcome"}))[:2] == [
        "trace-b", "trace-a"]
    everything = client.get("/api/v1/traces", params={"state": "scored", "agent": "support",
                                                      "domain": "retail"})
    assert set(ids(everything)) == set(TRACES) and everything.json()["total"] == 3
    none = client.get("/api/v1/traces", params={"state": "pending"})
    assert ids(none) == [] and none.json()["total"] == 0
    assert client.get("/api/v1/traces", params={"domain": "airline"}).json()["total"] == 0
    by_state = client.get("/api/v1/traces", params={"sort": "-scoring_state"})
    assert len(ids(by_state)) == 3
    assert ids(client.get("/api/v1/traces", params={"sort": "-actions_scored"}))
    bad = client.get("/api/v1/traces", params={"state": "finished"})
    assert bad.status_code == 422 and bad.json()["field"] == "state"
