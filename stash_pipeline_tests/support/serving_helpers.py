"""A deployment for the serving suite: the API and the scoring server on loopback ports over one
store and object store, real checkpoints of the tiny model, and stored scores made by the real
scoring job (the worker's ``main`` in this process, as the defs/ suites run it)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from stash_pipeline.api import create_app as create_api
from stash_pipeline.compute.contract import CHECKPOINT_INPUT
from stash_pipeline.objects import LocalObjectStore, reward_model_checkpoint_key
from stash_pipeline.pipelines import trace_scoring
from stash_pipeline.serving.models import ModelRegistry
from stash_pipeline.serving.protocol import scoring_token
from stash_pipeline.serving.server import create_app as create_server
from stash_pipeline.serving.settings import ServeSettings
from stash_pipeline.store import Release, Store
from stash_pipeline.worker.runner import main as run_worker
from stash_pipeline.worker.serving import Engine
from stash_pipeline_tests.support.api_helpers import (  # noqa: F401 - the suite's conftest takes module_store from here
    SETTINGS,
    TLS,
    Api,
    loopback_socket,
    module_store,
    serve,
)
from stash_pipeline_tests.support.held_engine import HeldEngine
from stash_pipeline_tests.support.waiting import PATIENT_S, REQUEST_S, bound

SECRET = b"k" * 32
TOKEN = scoring_token(SECRET)
# A user turn that makes a conversation longer than the tiny model's window (256 tokens).
LONG_TEXT = " ".join(f"Order {i} was late and the box was damaged." for i in range(40))


def model_route(model_id: str) -> str:
    """The API's /rewards route of a personal model."""
    return f"/api/v1/rm/reward-models/{model_id}/rewards"


@dataclass
class Deployment:
    api: Api
    scoring_url: str
    engine: HeldEngine
    registry: ModelRegistry

    def client(self, key: str | None = None) -> httpx.Client:
        return self.api.client(key)

    def account(self, name: str, **options: Any) -> tuple[str, httpx.Client]:
        return self.api.account(name, **options)

    def scoring_client(self, token: str = TOKEN) -> httpx.Client:
        """A client of the scoring server itself, with the API's token."""
        return httpx.Client(base_url=self.scoring_url, timeout=bound(REQUEST_S), verify=TLS,
                            headers={"Authorization": f"Bearer {token}"})


@contextmanager
def scoring_server(store: Store, objects: Any, *, engine: Engine | None = None,
                   **settings: Any) -> Iterator[tuple[str, Engine, ModelRegistry]]:
    """The scoring server on a loopback port: (url, engine, registry)."""
    engine = engine or HeldEngine(batch_tokens=16384)
    registry = ModelRegistry(store, objects, engine, device="cpu")
    sock = loopback_socket()
    app = create_server(registry, engine, ServeSettings(
        **{"token": TOKEN, "refresh_s": 3600.0, "timeout_s": bound(PATIENT_S), **settings}))
    for _ in serve(app, sock):
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", engine, registry


@contextmanager
def api_server(store: Store, objects: Any, scoring_url: str, **settings: Any) -> Iterator[str]:
    sock = loopback_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    options = {"scoring_url": scoring_url, "scoring_token": TOKEN,
               "scoring_timeout_s": bound(PATIENT_S), "max_rewards_bytes": 256 * 1024,
               **settings}
    for _ in serve(create_api(store, objects, replace(SETTINGS, **options)), sock):
        yield url


def local_objects(folder: Path) -> LocalObjectStore:
    from stash_pipeline.objects import UrlSigner

    return LocalObjectStore(folder / "objects", signer=UrlSigner(SECRET))


def closed_port_url() -> str:
    """A loopback URL nothing listens on."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


def conversation(trace_id: str, text: str = "Refund order 7, please.") -> dict[str, Any]:
    """An OpenAI-format trace: text, two tool calls and their results, a final reply."""
    return {"id": trace_id, "agent": "support", "metadata": {"task_id": "t1"}, "messages": [
        {"role": "system", "content": "Follow the refund policy."},
        {"role": "user", "content": text},
        {"role": "assistant", "content": "Checking the order.", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_order", "arguments": "{\"order_id\": 7}"}},
            {"id": "c2", "type": "function",
             "function": {"name": "get_policy", "arguments": "{\"kind\": \"refund\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"status\": \"delivered\"}"},
        {"role": "tool", "tool_call_id": "c2", "content": "{\"days\": 30}"},
        {"role": "assistant", "content": "Refunded: you will see it within 5 days."},
    ]}


def import_conversations(client: httpx.Client, *traces: dict[str, Any]) -> None:
    body = "\n".join(json.dumps(t) for t in traces) + "\n"
    response = client.post("/api/v1/traces", content=body,
                           headers={"Content-Type": "application/x-ndjson"})
    assert response.status_code == 200, response.text


def succeeded_model(deployment: Deployment, client: httpx.Client, owner: str, archive: Path,
                    trace_ids: list[str], *, actions: bool = True) -> str:
    """A personal model queued through the API and run to success with ``archive`` as its
    checkpoint, as the pipeline would store it."""
    created = client.post("/api/v1/rm/reward-models", json={"name": "m", "trace_ids": trace_ids})
    assert created.status_code == 201, created.text
    model_id = created.json()["id"]
    store, objects = deployment.api.store, deployment.api.objects
    attempt = store.mark_running(model_id)
    uri = objects.put_file(reward_model_checkpoint_key(model_id, attempt), archive)
    store.mark_succeeded(model_id, checkpoint_uri=uri, metrics={
        "train_pairs": 2, "action_scoring_version": 1 if actions else None})
    return model_id


def release(deployment: Deployment, archive: Path, version: str = "r1") -> str:
    uri = deployment.api.objects.put_file(f"shared-evaluator/{version}/reward-model.tar.gz",
                                          archive)
    deployment.api.store.save_release(Release(version, uri, {"passed": True},
                                              {"training_traces": {}, "benchmark_traces": {}}))
    return version


def stored_scoring(deployment: Deployment, evaluator: str, trace_ids: list[str],
                   scratch: Path) -> None:
    """Score again, run now: the scoring job over the saved checkpoint (the worker's main in
    this process), its rows stored as the pipeline stores them."""
    store, objects = deployment.api.store, deployment.api.objects

    def run(job_dir: Path, uri: str) -> None:
        objects.get_file(uri, job_dir / CHECKPOINT_INPUT)
        assert run_worker(str(job_dir)) == 0, (job_dir / "worker.log").read_text()[-2000:]

    versions = {t: store.get_trace(t).version for t in trace_ids}
    trace_scoring.score(store, evaluator, versions, actions=True, run=run, artifact_dir=scratch,
                        name="stored")
