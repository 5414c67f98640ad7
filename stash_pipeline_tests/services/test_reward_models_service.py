"""The reward-model operations the CLI and the API share: only the caller's own models exist."""

from __future__ import annotations

import pytest

from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.services import reward_models
from stash_pipeline.store import Store
from stash_pipeline_tests.support.store_samples import make_record, make_trace


class Urls:
    def download_url(self, uri: str, expires_s: int = 300) -> str:
        return f"https://signed.example/{uri}?expires_in={expires_s}"


@pytest.fixture
def owned(store: Store) -> Store:
    store.import_traces([make_record(make_trace(f"t{i}", owner="ana")) for i in range(2)])
    store.import_traces([make_record(make_trace("b0", owner="bo"))])
    return store


def test_create_list_show_and_view(owned: Store) -> None:
    model = reward_models.create(owned, "ana", {"name": "refund-policy-v2", "trace_ids": ["t0"],
                                                "epochs": 2})
    assert reward_models.list_models(owned, "ana") == [model]
    view = reward_models.view(reward_models.get(owned, "ana", model.id))
    assert (view["status"], view["epochs"], view["trace_ids"], view["error"]) == \
        ("queued", 2, ["t0"], None)
    assert "checkpoint_uri" not in view


def test_another_accounts_model_is_not_found(owned: Store) -> None:
    model = reward_models.create(owned, "ana", {"name": "m", "trace_ids": ["t0", "t1"]})
    for call in (lambda: reward_models.get(owned, "bo", model.id),
                 lambda: reward_models.weights_url(owned, Urls(), "bo", model.id),
                 lambda: reward_models.score_again(owned, "bo", model.id)):
        with pytest.raises(NotFoundError):
            call()
    with pytest.raises(InputError) as error:
        reward_models.create(owned, "ana", {"name": "m", "trace_ids": ["b0"]})
    assert error.value.field == "trace_ids[0]"


def test_pre_rollout_accounts_have_no_reward_models(owned: Store) -> None:
    owned.create_account("old", reward_models_enabled=False)
    with pytest.raises(NotFoundError):
        reward_models.create(owned, "old", {"name": "m", "trace_ids": ["t0"]})
    with pytest.raises(NotFoundError):
        reward_models.list_models(owned, "old")


def test_weights_only_for_a_succeeded_model(owned: Store) -> None:
    model = reward_models.create(owned, "ana", {"name": "m", "trace_ids": ["t0"]})
    with pytest.raises(NotFoundError, match="queued"):
        reward_models.weights_url(owned, Urls(), "ana", model.id)
    owned.mark_running(model.id)
    owned.mark_succeeded(model.id, metrics={}, checkpoint_uri="s3://b/rm.tar.gz")
    assert reward_models.weights_url(owned, Urls(), "ana", model.id) == \
        "https://signed.example/s3://b/rm.tar.gz?expires_in=300"
    assert reward_models.score_again(owned, "ana", model.id).score_generation == 1
