"""Personal reward models as their owner sees them: request, list, show, weights, Score again.

Every function acts on the caller's own models only: another account's model, and every model of an
account that existed before the rollout, is "not found" (the API's 404), so ids leak nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.core.requests import parse_reward_model_request
from stash_pipeline.core.training_settings import DOWNLOAD_URL_EXPIRES_S
from stash_pipeline.core.trust import held_out_summary
from stash_pipeline.store import RewardModelRecord, Store

WEIGHTS_URL_SECONDS = DOWNLOAD_URL_EXPIRES_S  # the seed: a five-minute signed URL


class DownloadUrls(Protocol):
    def download_url(self, uri: str, expires_s: int = WEIGHTS_URL_SECONDS) -> str: ...


def _require_reward_models(store: Store, owner: str) -> None:
    try:
        enabled = store.get_account(owner).reward_models_enabled
    except NotFoundError:
        enabled = True  # an account is created with its first import; it owns no traces yet
    if not enabled:
        raise NotFoundError("reward models are not available to this account")


def create(store: Store, owner: str, body: Mapping[str, Any], *,
           local_base_models: Sequence[str] | None = None) -> RewardModelRecord:
    """Validate the request (InputError names the field) and queue the model. A local
    ``base_model`` must lie in ``local_base_models``; None (the CLI, for the deployment's owner)
    allows any local path, the API passes ``STASH_BASE_MODEL_DIRS`` (none by default)."""
    _require_reward_models(store, owner)
    request = parse_reward_model_request(body, local_dirs=local_base_models)
    return store.create_reward_model(owner, request)


def get(store: Store, owner: str, model_id: str) -> RewardModelRecord:
    _require_reward_models(store, owner)
    return store.get_reward_model(model_id, owner=owner)


def list_models(store: Store, owner: str) -> list[RewardModelRecord]:
    _require_reward_models(store, owner)
    return store.list_reward_models(owner=owner)


def weights_url(store: Store, objects: DownloadUrls, owner: str, model_id: str) -> str:
    """A URL of the checkpoint archive valid for five minutes; unfinished models are not found."""
    model = get(store, owner, model_id)
    if model.status != "succeeded" or not model.checkpoint_uri:
        raise NotFoundError(f"reward model {model_id} has no weights: it is {model.status}")
    return objects.download_url(model.checkpoint_uri, expires_s=WEIGHTS_URL_SECONDS)


def score_again_run_key(model: RewardModelRecord) -> str:
    """The run key of the model's latest Score again request (one scoring run per request)."""
    return f"{model.id}:score:{model.score_generation}"


def score_again(store: Store, owner: str, model_id: str) -> RewardModelRecord:
    """Queue a fresh scoring run of the saved checkpoint (no labelling calls, no retraining)."""
    get(store, owner, model_id)
    store.request_score_again(model_id)
    return store.get_reward_model(model_id)


def retry(store: Store, owner: str, model_id: str) -> RewardModelRecord:
    """Queue a failed model again; its next run is a new attempt."""
    get(store, owner, model_id)
    store.requeue(model_id)
    return store.get_reward_model(model_id)


def view(model: RewardModelRecord) -> dict[str, Any]:
    """The JSON form the API returns and `rm ... --json` prints (no storage locations; the
    ``error`` names no server path: ``mark_failed`` stores it without them)."""
    return {
        "id": model.id, "name": model.name, "status": model.status, "error": model.error,
        "metrics": model.metrics, "trace_ids": list(model.trace_ids),
        "base_model": model.base_model, "epochs": model.epochs, "max_pairs": model.max_pairs,
        "attempt": model.attempt,
        # eval_accuracy with its pairs, 95% interval and, on a handful of pairs, the seed's note.
        "held_out": held_out_summary(model.metrics or {}) if model.status == "succeeded"
        else None,
        **{name: value.isoformat() if value else None for name, value in (
            ("created_at", model.created_at), ("started_at", model.started_at),
            ("finished_at", model.finished_at))},
    }
