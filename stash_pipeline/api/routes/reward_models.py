"""The seed's personal reward-model routes (``/api/v1/rm/reward-models``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends

from stash_pipeline.api.auth import AccountDep
from stash_pipeline.api.bodies import REWARD_MODEL_REQUEST
from stash_pipeline.api.deps import ObjectsDep, SettingsDep, StoreDep
from stash_pipeline.api.ids import readable_ids
from stash_pipeline.api.responses import ModelTrustReport, RewardModels, RewardModelView, WeightsUrl
from stash_pipeline.api.search import GroupBy
from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.objects import ObjectNotFoundError
from stash_pipeline.services import reward_models, trust

router = APIRouter(prefix="/api/v1/rm/reward-models", tags=["reward models"],
                   dependencies=[Depends(readable_ids)])
NOT_FOUND = {404: {"description": "Not yours, not there, or an account from before the rollout."}}


def _view(model: Any, store: Any) -> RewardModelView:
    """The model, with what it waits for in the run queue and its latest Score again's state
    (with the owner's traces still queued for it)."""
    from stash_pipeline.dagster_runs import model_queue_fields

    return RewardModelView(**reward_models.view(model), **model_queue_fields(
        model, store.score_again_queued(model.id) if model.score_generation else 0))


@router.post("", status_code=201, responses={
    **NOT_FOUND, 422: {"description": "An unknown field, `compute`, a missing or empty "
                                      "`trace_ids`, a trace that is not yours, a bad value."}},
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": REWARD_MODEL_REQUEST}}}})
def create_reward_model(account: AccountDep, store: StoreDep, settings: SettingsDep,
                        body: Any = Body(...)) -> RewardModelView:
    """Queue a personal reward model; it returns the queued model."""
    model = reward_models.create(store, account.id, body,
                                 local_base_models=settings.base_model_dirs)
    return _view(model, store)


@router.get("", responses=NOT_FOUND)
def list_reward_models(account: AccountDep, store: StoreDep) -> RewardModels:
    models = reward_models.list_models(store, account.id)
    return RewardModels(reward_models=[_view(m, store) for m in models])


@router.get("/{model_id}", responses=NOT_FOUND)
def get_reward_model(model_id: str, account: AccountDep, store: StoreDep) -> RewardModelView:
    """Status, error, metrics and timestamps; `wait` while queued (what it waits for: its run,
    or the worker with `runs_ahead`), `score_again` (the latest Score again's status, error and
    wait, and `queued_traces`: the owner's traces still queued for it, scored in bounded chunks
    after its first)."""
    return _view(reward_models.get(store, account.id, model_id), store)


@router.get("/{model_id}/weights", responses={
    404: {"description": "Not yours, or not succeeded (no weights yet)."}})
def get_weights(model_id: str, account: AccountDep, store: StoreDep,
                objects: ObjectsDep) -> WeightsUrl:
    """A URL of `reward-model.tar.gz` that works for five minutes, without your API key."""
    try:
        return WeightsUrl(url=reward_models.weights_url(store, objects, account.id, model_id))
    except ObjectNotFoundError:  # its message names the object's server path or bucket
        raise NotFoundError(f"reward model {model_id} has no stored weights") from None


@router.post("/{model_id}/score", status_code=202, responses={
    **NOT_FOUND, 409: {"description": "The model has not succeeded: no checkpoint to score with."}})
def score_again(model_id: str, account: AccountDep, store: StoreDep) -> RewardModelView:
    """Score again: a fresh scoring run of the saved checkpoint, without labelling or training."""
    model = reward_models.score_again(store, account.id, model_id)
    return _view(model, store)


@router.get("/{model_id}/trust", responses={
    404: {"description": "Not yours, not succeeded, or an account from before the rollout."}})
def get_trust(model_id: str, account: AccountDep, store: StoreDep,
              group_by: GroupBy = None) -> ModelTrustReport:
    """How far to trust the model on your traces it did not train on: held-out accuracy, AUC
    against verified outcomes, Spearman with ratings, the calibrated score's reliability curve,
    each with its 95% interval and n, overall and per tool, domain and agent (docs/trust.md)."""
    return trust.model_report(store, account.id, model_id, group_by)
