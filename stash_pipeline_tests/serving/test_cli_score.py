"""`stash-pipeline score FILE --model ID|release [--candidates]`: the API's figures, in this
process, from the same store and object store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stash_pipeline.cli import main
from stash_pipeline_tests.support.serving_helpers import (
    SECRET,
    Deployment,
    conversation,
    import_conversations,
    release,
    succeeded_model,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def cli_env(served: Deployment, monkeypatch: pytest.MonkeyPatch) -> Deployment:
    """The CLI's environment pointing at the deployment's store and object store."""
    monkeypatch.setenv("DATABASE_URL", str(served.api.store.url))
    monkeypatch.setenv("STASH_HOME", str(served.api.objects.root.parent))
    monkeypatch.setenv("STASH_SIGNING_KEY", SECRET.decode())
    return served


def last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def without_kind_keys(answer: dict) -> dict:
    return {k: v for k, v in answer.items() if k not in ("evaluator", "kind")}


def test_score_prints_the_apis_figures(cli_env: Deployment, checkpoints, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]):
    ana, client = cli_env.account("ana")
    traces = [conversation("t1"), conversation("t2", text="Where is order 8?")]
    import_conversations(client, *traces)
    model_id = succeeded_model(cli_env, client, ana, checkpoints["personal"], ["t1"])
    version = release(cli_env, checkpoints["shared"])
    file = tmp_path / "conversations.jsonl"
    file.write_text("\n".join(json.dumps(t) for t in traces) + "\n")
    for model, route in ((model_id, f"/api/v1/rm/reward-models/{model_id}/rewards"),
                         ("release", "/api/v1/evaluator/rewards")):
        assert main(["score", str(file), "--model", model, "--owner", ana, "--json"]) == 0
        printed = last_json(capsys.readouterr().out)
        assert printed["evaluator"] == (model_id if model != "release" else version)
        for trace, answer in zip(traces, printed["conversations"]):
            api = client.post(route, json={"conversation": trace}).json()
            assert answer.pop("trace_id") == trace["id"]
            assert _close(answer, without_kind_keys(api)), (answer, api)

    assert main(["score", str(file), "--model", model_id, "--owner", ana]) == 0
    shown = capsys.readouterr().out
    assert "t1: raw " in shown and "m2.call1" in shown and "CREDIT" in shown


def test_score_candidates_ranks_as_the_api_does(cli_env: Deployment, checkpoints,
                                                tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]):
    ana, client = cli_env.account("ana")
    import_conversations(client, conversation("t1"))
    model_id = succeeded_model(cli_env, client, ana, checkpoints["personal"], ["t1"])
    body = {"context": conversation("t1")["messages"][:2],
            "candidates": ["Checking the order.", "No.", {"role": "assistant", "content": "Sure."}]}
    file = tmp_path / "candidates.json"
    file.write_text(json.dumps(body))
    assert main(["score", str(file), "--model", model_id, "--owner", ana, "--candidates",
                 "--json"]) == 0
    printed = last_json(capsys.readouterr().out)
    api = client.post(f"/api/v1/rm/reward-models/{model_id}/rewards", json=body).json()
    assert printed["ranking"] == api["ranking"]
    assert _close(without_kind_keys(printed), without_kind_keys(api))
    assert main(["score", str(file), "--model", model_id, "--owner", ana, "--candidates"]) == 0
    assert "3 candidates ranked by" in capsys.readouterr().out


def test_score_refuses_what_it_cannot_score(cli_env: Deployment, checkpoints, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]):
    ana, client = cli_env.account("ana")
    import_conversations(client, conversation("t1"))
    queued = client.post("/api/v1/rm/reward-models",
                         json={"name": "q", "trace_ids": ["t1"]}).json()["id"]
    file = tmp_path / "c.json"
    file.write_text(json.dumps(conversation("t1")))
    assert main(["score", str(file), "--model", queued, "--owner", ana]) == 2
    assert "queued" in capsys.readouterr().err
    assert main(["score", str(file), "--model", "release"]) == 2
    assert "no shared evaluator release" in capsys.readouterr().err
    file.write_text(json.dumps({"context": [], "candidates": ["x"], "extra": 1}))
    assert main(["score", str(file), "--model", "release", "--candidates"]) == 2
    assert "c.json" in capsys.readouterr().err


def _close(a, b) -> bool:
    """Equal structures, numbers within float rounding (the CLI reads alone, the server in a
    batch)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-5
    return a == b
