"""How far to trust an evaluator, as its user asks (docs/trust.md): the report of one of their
succeeded personal models, or of a shared release, on their own traces it did not train on.

The same rules as the rest of the API: another account's model, and every model of an account
from before the rollout, is not found; a release is every account's, its report on each
account's own traces.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.core.trust import facts_digest, trust_report
from stash_pipeline.services import reward_models
from stash_pipeline.store import Store

CURRENT = "current"  # the release version that names the current release


def report(store: Store, owner: str, evaluator: str,
           group_by: str | None = None) -> dict[str, Any]:
    """The evaluator's trust report on the owner's traces it did not train on (``core.trust``),
    from the facts as they are now (NotFoundError for no such release or model). Saved, whole
    and as the SQL view's figures, when the facts changed since it was last saved;
    ``computed_at`` says when that was. ``group_by`` names the metadata field that says which
    traces share a task (``core.trust_groups``; default: the task id, else the evaluation
    context, else the first user message)."""
    facts = store.trust_facts(owner, evaluator, group_by)
    stored = store.stored_trust_report(owner, evaluator)
    digest = facts_digest(facts)
    if stored is not None and stored[1] == digest:
        saved, _, computed_at = stored
        return {**saved, "computed_at": computed_at.isoformat()}
    computed, computed_at = trust_report(facts), datetime.now(timezone.utc)
    store.save_trust_report(owner, evaluator, computed, digest, computed_at)
    return {**computed, "computed_at": computed_at.isoformat()}


def model_verdict(store: Store, owner: str, model_id: str) -> dict[str, Any] | None:
    """The verdict of the model's report as last saved (``core.trust.headline_verdict``),
    computed now when there is none in the current format; None without outcomes to judge."""
    stored = store.stored_trust_report(owner, model_id)
    saved = stored[0] if stored is not None else None
    if saved is None or "verdict" not in saved:
        saved = report(store, owner, model_id)
    return saved["verdict"]


def model_report(store: Store, owner: str, model_id: str,
                 group_by: str | None = None) -> dict[str, Any]:
    """The report of the caller's succeeded personal model; NotFoundError otherwise."""
    model = reward_models.get(store, owner, model_id)
    if model.status != "succeeded":
        raise NotFoundError(f"reward model {model_id} has no trust report: it is {model.status}")
    return {**report(store, owner, model.id, group_by), "name": model.name}


def release_version(store: Store, version: str) -> str:
    """The release a version names (``current``: the latest); NotFoundError for none."""
    if version == CURRENT:
        release = store.latest_release()
        if release is None:
            raise NotFoundError("no shared evaluator release yet: traces wait for the first one")
        return release.version
    return store.get_release(version).version


def release_report(store: Store, owner: str, version: str,
                   group_by: str | None = None) -> dict[str, Any]:
    """The report of a shared release on the caller's traces."""
    return report(store, owner, release_version(store, version), group_by)

