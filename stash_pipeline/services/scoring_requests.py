"""Score again, as the CLI and the API ask for it: a request for chosen traces of the owner's,
queued in the store for the ``score_again_for_traces`` sensor, whose ``trace_scores`` run scores
them (``pipelines.trace_scoring``).

The seed: "Score again requests a fresh run of the saved checkpoint without labeling calls or
retraining. Advanced options let you select a personal model and choose Score actions. Older
personal models need new training with action comparisons."
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.core.record_ids import parse_record_id
from stash_pipeline.core.validation import check_id, check_trace_id
from stash_pipeline.pipelines.trace_scoring import (
    NEEDS_ACTION_TRAINING,
    SCORING_REQUEST_TAG,
    Scorer,
    model_scorer,
    release_scorer,
)
from stash_pipeline.services import reward_models
from stash_pipeline.store import Store
from stash_pipeline.store.scoring_requests import ScoringRequest

# Traces one Score again request may name (a whole account is `rm score`'s job).
MAX_TRACES_PER_REQUEST = 10_000


def scorer(store: Store, owner: str, model_id: str | None) -> Scorer:
    """The release (``model_id`` None) or the owner's succeeded model; NotFoundError otherwise
    (no release yet, or no such model of the owner's with a checkpoint)."""
    if model_id is None:
        release = store.latest_release()
        if release is None:
            raise NotFoundError("no shared evaluator release yet: traces wait for the first "
                                "release; choose a personal model with --model")
        return release_scorer(release)
    return model_scorer(reward_models.get(store, owner, model_id))


def request(store: Store, owner: str, trace_ids: Sequence[Any], *, model_id: str | None = None,
            actions: bool = False) -> ScoringRequest:
    """Queue Score again for these traces of the owner's; the scoring sensor runs it.

    InputError (the API's 422) for a bad list or for actions asked of a model trained without
    action comparisons (the seed's message); NotFoundError for a trace or model not the owner's.
    """
    if not isinstance(trace_ids, (list, tuple)) or not trace_ids:
        raise InputError("give at least one trace id", field="trace_ids")
    if len(trace_ids) > MAX_TRACES_PER_REQUEST:
        raise InputError(f"at most {MAX_TRACES_PER_REQUEST} traces a request, got "
                         f"{len(trace_ids)}", field="trace_ids")
    for index, trace_id in enumerate(trace_ids):
        check_trace_id(trace_id, field=f"trace_ids[{index}]")
    if model_id is not None:
        check_id(model_id, "model_id", what="a reward model id")
    if not isinstance(actions, bool):
        raise InputError(f"actions is true or false, got {actions!r}", field="actions")
    chosen = scorer(store, owner, model_id)
    if actions and not chosen.scores_actions:
        raise InputError(NEEDS_ACTION_TRAINING, field="actions")
    wanted = list(dict.fromkeys(trace_ids))
    mine = store.owned_versions(wanted, owner)
    missing = [t for t in wanted if t not in mine]
    if missing:  # another account's trace reads as missing: ids leak nothing
        raise NotFoundError(f"no trace {', '.join(missing[:5])} of yours")
    return store.request_scoring(owner=owner, evaluator=chosen.evaluator,
                                 traces={t: mine[t] for t in wanted}, actions=actions)


def get(store: Store, owner: str, request_id: str | int) -> ScoringRequest:
    """The owner's request by its id as given (a URL's text: its UUID, or the integer id of a
    request made before 0012); InputError for text that is neither, NotFoundError for another
    account's (ids leak nothing)."""
    key = parse_record_id(request_id, field="request_id", what="a Score again request")
    scoring = store.get_scoring_request(key)
    if scoring.owner != owner:
        raise NotFoundError(f"no scoring request {key}")
    return scoring


def run_tags(scoring: ScoringRequest) -> dict[str, str]:
    """The tag that names the request's run (the ``score_again_for_traces`` sensor sets it)."""
    return {SCORING_REQUEST_TAG: scoring.run_ref}


def request_view(scoring: ScoringRequest) -> dict[str, Any]:
    """The JSON form the API returns and `traces score --json` prints."""
    return {"request_id": scoring.id, "evaluator": scoring.evaluator,
            "trace_ids": list(scoring.traces), "actions": scoring.actions,
            "created_at": scoring.created_at.isoformat()}
