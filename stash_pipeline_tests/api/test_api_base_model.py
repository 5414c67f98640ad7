"""`base_model` from an API caller: a Hugging Face id, or a path inside STASH_BASE_MODEL_DIRS only;
and no answer of the API shows a server path."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stash_pipeline.api import create_app
from stash_pipeline.compute.contract import job_directory, keep_only_logs
from stash_pipeline.core.failures import hide_server_paths
from stash_pipeline.objects import LocalObjectStore, UrlSigner
from stash_pipeline.pipelines.personal_training import attempt_name
from stash_pipeline.store import Store
from stash_pipeline_tests.support.api_helpers import (
    SETTINGS,
    Api,
    import_traces,
    loopback_socket,
    serve,
    succeed,
)

RM = "/api/v1/rm/reward-models"


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    (folder / "tiny").mkdir(parents=True)
    return folder


@pytest.fixture
def allowing(store: Store, tmp_path: Path, allowed: Path) -> Iterator[Api]:
    """A second server on the module's (emptied) store, with one allowed model directory."""
    sock = loopback_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    objects = LocalObjectStore(tmp_path / "objects", api_url=url, signer=UrlSigner(b"k" * 32))
    settings = dataclasses.replace(SETTINGS, base_model_dirs=(str(allowed),))
    for _ in serve(create_app(store, objects, settings), sock):
        yield Api(url, store, objects)


def request_model(client: httpx.Client, base_model: str, trace: str = "t1") -> httpx.Response:
    return client.post(RM, json={"name": "m", "trace_ids": [trace], "base_model": base_model})


def test_paths_outside_the_allowed_directories_are_422(allowing: Api, allowed: Path,
                                                       tmp_path: Path) -> None:
    served = allowing
    victim, victim_client = served.account("victim")
    import_traces(victim_client, "v1")
    victim_model = request_model(victim_client, "Qwen/Qwen3-0.6B", "v1").json()["id"]
    victim_dir = job_directory(tmp_path / "jobs", victim_model, attempt_name(1)) / "reward-model"
    victim_dir.mkdir(parents=True)
    (allowed / "escape").symlink_to(tmp_path / "jobs")
    _, client = served.account("mallory")
    import_traces(client, "t1")
    refused = [
        "/etc", str(victim_dir), str(tmp_path), "../" + victim_model, "./tiny", "~/models",
        f"{allowed}/../jobs", f"{allowed}/escape/{victim_model}/attempt-1/reward-model",
        str(allowed) + "-evil/x", "a/b/c", "org/../etc", "C:\\models", "",
    ]
    for value in refused:
        response = request_model(client, value)
        assert response.status_code == 422, (value, response.text)
        assert response.json()["field"] == "base_model", response.text
        assert str(tmp_path) not in response.text.replace(value, "")
    for value in ("Qwen/Qwen3-0.6B", "gpt2", "bert-base-uncased", str(allowed / "tiny"),
                  f"{allowed}/tiny/../tiny"):
        assert request_model(client, value).status_code == 201, value


def test_the_default_allows_no_local_path(api: Api, tmp_path: Path) -> None:
    _, client = api.account("ana")
    import_traces(client, "t1")
    assert request_model(client, str(tmp_path)).status_code == 422
    assert request_model(client, "Qwen/Qwen3-0.6B").status_code == 201


def test_a_finished_attempt_keeps_only_its_logs(tmp_path: Path) -> None:
    job = tmp_path / "attempt-1"
    for name in ("reward-model/model.safetensors", "attempt-logs/001-a.log", "worker.log",
                 "reward-model.tar.gz", "train_pairs.jsonl", "settings.json"):
        (job / name).parent.mkdir(parents=True, exist_ok=True)
        (job / name).write_text("x")
    keep_only_logs(job)
    assert sorted(str(p.relative_to(job)) for p in job.rglob("*")) == [
        "attempt-logs", "attempt-logs/001-a.log", "worker.log"]
    keep_only_logs(tmp_path / "missing")  # nothing there: nothing to do


def test_failure_reasons_and_404s_show_no_server_path(api: Api, tmp_path: Path) -> None:
    reason = (f'File "{tmp_path}/stash_pipeline/worker/train.py", line 3\nModelLoadError: '
              f"model {tmp_path}/jobs/x: no config.json; see file://{tmp_path}/o/r.tar.gz "
              f"and https://huggingface.co/Qwen/Qwen3-0.6B; PATH={tmp_path}/bin:{tmp_path}/sbin")
    shown = hide_server_paths(reason)
    assert hide_server_paths(shown) == shown and ".../bin:.../sbin" in shown
    assert str(tmp_path) not in shown and ".../train.py" in shown and ".../r.tar.gz" in shown
    assert "https://huggingface.co/Qwen/Qwen3-0.6B" in shown

    _, client = api.account("ana")
    import_traces(client, "t1")
    model = request_model(client, "Qwen/Qwen3-0.6B").json()["id"]
    api.store.mark_running(model)
    api.store.mark_failed(model, reason)
    shown = client.get(f"{RM}/{model}").json()["error"]
    assert str(tmp_path) not in shown and "no config.json" in shown

    other = request_model(client, "Qwen/Qwen3-0.6B").json()["id"]
    succeed(api.store, api.objects, other, tmp_path)
    url = client.get(f"{RM}/{other}/weights").json()["url"]
    for path in api.objects.root.rglob("*.tar.gz"):
        os.unlink(path)
    for response in (httpx.get(url), client.get(f"{RM}/{other}/weights")):
        assert response.status_code == 404, response.text
        assert str(tmp_path) not in response.text and "file:" not in response.text
        assert str(api.objects.root) not in response.text
