"""Which checkpoints the scoring server holds (serving/models.py): the release and the chosen
models pinned and loaded once, others loaded on first use and dropped least recently used first,
a checkpoint that fails to load answered 503 and tried again later."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.core.requests import parse_reward_model_request
from stash_pipeline.objects import reward_model_checkpoint_key
from stash_pipeline.serving import models as serving_models
from stash_pipeline.serving.models import ModelFailed, ModelLoading, ModelRegistry
from stash_pipeline.store import Release, Store
from stash_pipeline_tests.support.serving_helpers import local_objects
from stash_pipeline_tests.support.store_samples import make_record, make_trace
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, REQUEST_S, bound


class RecordingEngine:
    def __init__(self) -> None:
        self.held: dict[str, object] = {}

    def add_model(self, key: str, loaded: object) -> None:
        self.held[key] = loaded

    def remove_model(self, key: str) -> None:
        self.held.pop(key)


@pytest.fixture
def deployment(store: Store, tmp_path: Path):
    """A store with two accounts' succeeded models and a release, their 'checkpoints' stand-in
    files (the loader here only records what it was asked to load)."""
    objects = local_objects(tmp_path)
    archive = tmp_path / "reward-model.tar.gz"
    archive.write_bytes(b"stand-in")
    store.import_traces([make_record(make_trace(t, owner=o)) for t, o in (("a1", "ana"),
                                                                          ("b1", "bob"))])
    made = {}
    for owner, count in (("ana", 3), ("bob", 1)):
        traces = store.trace_ids(owner=owner)
        for n in range(count):
            model = store.create_reward_model(owner, parse_reward_model_request(
                {"name": f"{owner}{n}", "trace_ids": traces}))
            attempt = store.mark_running(model.id)
            uri = objects.put_file(reward_model_checkpoint_key(model.id, attempt), archive)
            store.mark_succeeded(model.id, metrics={}, checkpoint_uri=uri)
            made.setdefault(owner, []).append(model.id)
            time.sleep(0.01)  # distinct finish times: "most recent" is well defined
    uri = objects.put_file("shared-evaluator/r1/reward-model.tar.gz", archive)
    store.save_release(Release("r1", uri, {}, {}))
    return store, objects, made


def registry(deployment, *, max_models=8, chosen=(), load=None) -> tuple[ModelRegistry,
                                                                        RecordingEngine]:
    store, objects, _ = deployment
    engine = RecordingEngine()
    loads: list[str] = []

    def recorded(path: str, device: str | None = None) -> str:
        loads.append(path)
        return path

    held = ModelRegistry(store, objects, engine, max_models=max_models, chosen=chosen,
                         load=load or recorded)
    held.loads = loads
    return held, engine


def settled(held: ModelRegistry) -> dict[str, dict]:
    # Every load queued so far is done.
    held._loader.submit(lambda: None).result(timeout=bound(REQUEST_S))
    return {s["evaluator"]: s for s in held.states()}


def test_the_release_and_each_owners_recent_models_are_pinned_and_loaded_once(
        deployment, monkeypatch):
    monkeypatch.setenv("STASH_PERSONAL_SCORING_MODELS", "2")
    _, _, made = deployment
    held, engine = registry(deployment)
    held.refresh()
    held.refresh()  # again: nothing loads twice
    states = settled(held)
    expected = {"r1", *made["ana"][-2:], *made["bob"]}
    assert set(states) == set(engine.held) == expected
    assert all(s["pinned"] and s["state"] == "ready" for s in states.values())
    assert len(held.loads) == 4
    held.close()


def test_chosen_models_and_the_newest_release_replace_the_pins(deployment):
    store, objects, made = deployment
    held, engine = registry(deployment, chosen=[made["ana"][0]])
    held.refresh()
    assert {k for k, s in settled(held).items() if s["pinned"]} == {"r1", made["ana"][0]}
    archive = Path(objects.root) / "r2.tar.gz"
    archive.write_bytes(b"stand-in")
    store.save_release(Release("r2", objects.put_file("shared-evaluator/r2/a.tar.gz", archive),
                               {}, {}))
    held.refresh()
    states = settled(held)
    assert held.release == "r2" and states["r2"]["pinned"] and not states["r1"]["pinned"]
    held.close()


def test_other_models_load_on_first_use_and_the_least_recently_used_go(deployment):
    _, _, made = deployment
    held, engine = registry(deployment, max_models=2)
    first, second, third = made["ana"]
    for model_id in (first, second):
        assert held.ready(model_id, timeout_s=bound(REQUEST_S)).state == "ready"
    # first used again: second is now the least recent.
    held.ready(first, timeout_s=bound(REQUEST_S))
    held.ready(third, timeout_s=bound(REQUEST_S))
    settled(held)
    assert set(engine.held) == {first, third}
    with pytest.raises(NotFoundError):
        held.ensure("no-such-model")
    held.close()


def test_a_checkpoint_that_fails_to_load_is_503_then_tried_again(deployment, monkeypatch):
    _, _, made = deployment
    gate = threading.Event()
    attempts = []

    def failing(path: str, device: str | None = None) -> str:
        attempts.append(path)
        gate.wait(bound(REQUEST_S))
        raise ValueError("not a checkpoint")

    # No retry within the test's own steps, however slow a busy machine makes them.
    monkeypatch.setattr(serving_models, "RETRY_FAILED_S", bound(PROCESS_EXIT_S))
    held, _ = registry(deployment, load=failing)
    model_id = made["bob"][0]
    with pytest.raises(ModelLoading):
        held.ready(model_id, timeout_s=0.05)
    gate.set()
    with pytest.raises(ModelFailed, match="not a checkpoint"):
        held.ready(model_id, timeout_s=bound(REQUEST_S))
    with pytest.raises(ModelFailed):  # not again before RETRY_FAILED_S
        held.ready(model_id, timeout_s=bound(REQUEST_S))
    monkeypatch.setattr(serving_models, "RETRY_FAILED_S", 0.0)
    with pytest.raises(ModelFailed):
        held.ready(model_id, timeout_s=bound(REQUEST_S))
    assert len(attempts) == 2
    held.close()
