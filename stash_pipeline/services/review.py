"""The review queue as its owner works through it: the CLI's `review`, the API's
/api/v1/review routes and the viewer's /ui/review pages (docs/viewer.md, "The review queue").

The queue's order is core.review_order's; the store sorts and pages it in SQL. The reviewer is a
name (the viewer's: the account's name): comparisons that name authored are not theirs to review,
and the queue can be narrowed to the items assigned to a name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.core.feedback import VerifiedOutcome
from stash_pipeline.core.review_order import (
    REASON_TEXT,
    REASONS,
    Verdicts,
    focus_action,
    personal_verdict,
    reason,
)
from stash_pipeline.core.trace_search import TraceFilter
from stash_pipeline.core.validation import check_name
from stash_pipeline.extraction.config import ExtractionConfig
from stash_pipeline.services import reward_models, trust
from stash_pipeline.services.traces import owned_trace
from stash_pipeline.store import Store
from stash_pipeline.store.review_queue import KINDS, QueueItem, QueueScope

MAX_PAGE = 200
MAX_ITEMS_PER_CHANGE = 10_000
# An item's review state as the API sets it: "pending" puts it back as it was.
STATUSES = ("reviewed", "skipped", "pending")


def newest_model_id(store: Store, owner: str) -> str | None:
    """The owner's most recently succeeded personal model, whose verdict the queue reads."""
    try:
        models = reward_models.list_models(store, owner)
    except NotFoundError:  # an account from before the rollout
        return None
    done = [m for m in models if m.status == "succeeded"]
    newest = max(done, key=lambda m: (m.finished_at or m.created_at, m.id), default=None)
    return newest.id if newest else None


def scope(store: Store, owner: str, *, reviewer: str, where: TraceFilter | None = None,
          model_id: str | None = None, assignee: str | None = None, unassigned: bool = False,
          kind: str | None = None) -> QueueScope:
    """The queue's scope: the latest release's credit and ``model_id``'s verdict (default the
    newest succeeded personal model); NotFoundError for a model that is not the owner's."""
    check_name(reviewer, "reviewer", optional=False)
    check_name(assignee, "assignee")
    if kind is not None and kind not in KINDS:
        raise InputError(f"kind is one of {', '.join(KINDS)}, got {kind!r}", field="kind")
    if assignee is not None and unassigned:
        raise InputError("ask for the items of an assignee or the unassigned ones, not both",
                         field="unassigned")
    if model_id is not None:
        model = reward_models.get(store, owner, model_id)
        if model.status != "succeeded":
            raise InputError(f"reward model {model_id} is {model.status}: only a succeeded "
                             "model has scores", field="model_id")
    else:
        model_id = newest_model_id(store, owner)
    set_aside = None if model_id is None else set_aside_because(store, owner, model_id)
    release = store.latest_release()
    return QueueScope(owner=owner, reviewer=reviewer,
                      release=release.version if release else None,
                      model_id=None if set_aside else model_id, where=where, assignee=assignee,
                      unassigned=unassigned, kinds=(kind,) if kind else KINDS,
                      set_aside=set_aside)


def set_aside_because(store: Store, owner: str, model_id: str) -> str | None:
    """Why the queue does not read a personal model's verdicts (None: it does): its trust
    report judged it and it does not beat its baselines, so its disagreements with the release
    and with outcomes would put its noise first."""
    verdict = trust.model_verdict(store, owner, model_id)
    if verdict is None or not verdict["judged"] or verdict["beats_baselines"]:
        return None
    return (f"Not ordered by personal model {model_id}: its trust report says its AUC against "
            f"verified outcomes, {verdict['value']:.3f} (95% {verdict['low']:.2f} to "
            f"{verdict['high']:.2f}, task-clustered), is {verdict['label']}, so its "
            "disagreements would put noise first. The queue reads the release's credit and "
            "the verified outcomes only.")


def review_yields(store: Store, owner: str, reviewer: str,
                  extraction: ExtractionConfig | None = None) -> dict[str, Any]:
    """What a reviewer's actions become, said before they start, with the counts so far: an
    approved comparison is a training pair; a comment only through extraction, when it is
    configured; a rating against their other ratings; marking an item done, none."""
    config = extraction or ExtractionConfig.from_env()
    extracts = config.enabled and config.api_key is not None
    counts = store.review_yield(owner, reviewer)
    actions = [
        {"action": "approve a comparison", "becomes_pairs": True,
         "so_far": counts.approved_comparisons,
         "text": "an approved comparison becomes a training pair, as given"},
        {"action": "comment", "becomes_pairs": extracts, "so_far": counts.comments,
         "text": ("a comment becomes training pairs through extraction (configured here)"
                  if extracts else "a comment becomes training pairs only with extraction "
                  "configured (ANTHROPIC_API_KEY, STASH_EXTRACTION on), which it is not here: "
                  "it is kept, and not trained on")},
        {"action": "rate", "becomes_pairs": True, "so_far": counts.ratings,
         "text": "a rating becomes pairs against your other ratings (of the same trace's "
                 "actions, or of traces of the same task)"},
        {"action": "mark done", "becomes_pairs": False, "so_far": counts.done,
         "text": "marking an item done makes no pair: it only takes it off the queue"},
    ]
    return {"reviewer": reviewer, "extraction_configured": extracts, "actions": actions}


def queue(store: Store, queue_scope: QueueScope, *, limit: int = 50,
          offset: int = 0) -> dict[str, Any]:
    """A page of the queue (items not reviewed yet, in order) with its progress."""
    if not 1 <= limit <= MAX_PAGE:
        raise InputError(f"limit is 1 to {MAX_PAGE}", field="limit")
    if offset < 0:
        raise InputError("offset is 0 or more", field="offset")
    items, counts = store.review_queue(queue_scope, limit=limit, offset=offset)
    compared = [i.id for i in items if i.kind == "comparison"]
    details = store.comparisons(compared) if compared else {}
    return {
        "items": [item_view(i, details.get(i.id)) for i in items],
        "total": counts.total, "reviewed": counts.reviewed, "pending": counts.pending,
        "limit": limit, "offset": offset,
        "next_offset": offset + limit if offset + limit < counts.pending else None,
        "release": queue_scope.release, "model_id": queue_scope.model_id,
        "model_set_aside": queue_scope.set_aside,
        "order": [{"reason": name, "text": REASON_TEXT[name]} for name in REASONS],
        "yields": review_yields(store, queue_scope.owner, queue_scope.reviewer),
    }


def next_item(store: Store, queue_scope: QueueScope) -> dict[str, Any]:
    """The first item not reviewed yet (null when the queue is done), its focus action, and the
    progress: ``reviewed`` of ``total``."""
    page = queue(store, queue_scope, limit=1)
    item = page["items"][0] if page["items"] else None
    if item is not None and item["kind"] == "trace":
        item["focus_action"] = trace_focus(store, queue_scope, item["trace_id"])["focus_action"]
    return {"item": item, **{k: page[k] for k in ("total", "reviewed", "pending", "release",
                                                  "model_id", "model_set_aside", "yields")}}


def item_view(item: QueueItem, comparison: dict[str, Any] | None = None) -> dict[str, Any]:
    view = {"kind": item.kind, "id": item.id, "trace_id": item.trace_id,
            "reason": item.reason, "reason_text": REASON_TEXT[item.reason],
            "agent": item.agent, "domain": item.domain, "task_id": item.task_id,
            "preview": item.preview, "assignee": item.assignee,
            "status": item.status or "pending", "version": item.version,
            "created_at": item.created_at.isoformat()}
    if item.kind == "trace":
        view.update(shared_credit=item.shared, personal_verdict=item.personal,
                    nearest_credit=item.nearest, outcome_succeeded=item.outcome_succeeded)
    elif comparison is not None:
        view.update({key: comparison[key] for key in (
            "chosen_trace_id", "rejected_trace_id", "chosen_action_id", "rejected_action_id",
            "author", "rationale")})
    return view


def trace_focus(store: Store, queue_scope: QueueScope, trace_id: str) -> dict[str, Any]:
    """Why one trace of the owner's is where it is in the queue, and the action to look at
    first (core.review_order.focus_action), from its stored scores."""
    trace = owned_trace(store, queue_scope.owner, trace_id)
    credit: dict[str | None, dict[str, float | None]] = {queue_scope.release: {},
                                                         queue_scope.model_id: {}}
    for score in store.action_scores_for(trace.id):
        if score.trace_version == trace.version and score.evaluator in credit:
            credit[score.evaluator][score.action_id] = score.credit
    shared = credit[queue_scope.release] if queue_scope.release else {}
    personal = credit[queue_scope.model_id] if queue_scope.model_id else {}
    calibrated = next((s.calibrated for s in store.scores_for(trace.id)
                       if s.evaluator == queue_scope.model_id
                       and s.trace_version == trace.version), None)
    outcomes = [f for f in store.feedback_for([trace.id]) if isinstance(f, VerifiedOutcome)]

    def mean(values: dict[str, float | None]) -> float | None:
        found = [v for v in values.values() if v is not None]
        return sum(found) / len(found) if found else None

    nearest = [abs(c) for c in shared.values() if c is not None] or \
        [abs(c) for c in personal.values() if c is not None]
    verdicts = Verdicts(shared=mean(shared), personal=personal_verdict(mean(personal), calibrated),
                        outcome_succeeded=all(o.succeeded for o in outcomes) if outcomes
                        else None, nearest=min(nearest) if nearest else None)
    name = reason(verdicts)
    return {"reason": name, "reason_text": REASON_TEXT[name],
            "focus_action": focus_action(name, shared, personal, verdicts.outcome_succeeded),
            "shared_credit": verdicts.shared, "personal_verdict": verdicts.personal,
            "outcome_succeeded": verdicts.outcome_succeeded}


def _owned_items(store: Store, owner: str, items: Sequence[tuple[str, str]]
                 ) -> dict[str, int]:
    """Checks every (kind, id) is the owner's; the current version of each trace among them."""
    if not items:
        raise InputError("name at least one item", field="items")
    if len(items) > MAX_ITEMS_PER_CHANGE:
        raise InputError(f"at most {MAX_ITEMS_PER_CHANGE} items a change", field="items")
    for index, (kind, item_id) in enumerate(items):
        if kind not in KINDS:
            raise InputError(f"kind is one of {', '.join(KINDS)}, got {kind!r}",
                             field=f"items[{index}].kind")
        if not isinstance(item_id, str) or not item_id or len(item_id) > 64 \
                or "\x00" in item_id:
            raise InputError("an id is 1 to 64 characters, no NUL", field=f"items[{index}].id")
    traces = [i for k, i in items if k == "trace"]
    compared = [i for k, i in items if k == "comparison"]
    versions = store.owned_versions(traces, owner) if traces else {}
    found = store.owned_comparisons(compared, owner) if compared else set()
    missing = [i for i in traces if i not in versions] + [i for i in compared if i not in found]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more"
                                          if len(missing) > 5 else "")
        raise NotFoundError(f"no item {shown} of yours; nothing was changed")
    return versions


def _expected(items: Sequence[tuple[str, str]],
              expected: Mapping[tuple[str, str], int] | None) -> dict[tuple[str, str], int]:
    """The review versions the change was made against (each a whole number, of a named
    item)."""
    checked = dict(expected or {})
    for index, (key, version) in enumerate(checked.items()):
        if key not in items:
            raise InputError(f"a version for {key[0]} {key[1]}, which is not among the items",
                             field=f"versions[{index}]")
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise InputError(f"a review version is a whole number 0 or more, got {version!r}",
                             field=f"{key[0]} {key[1]}.version")
    return checked


def set_status(store: Store, owner: str, items: Sequence[tuple[str, str]], status: str, *,
               reviewer: str, expected: Mapping[tuple[str, str], int] | None = None
               ) -> list[dict[str, Any]]:
    """Mark items reviewed (a trace: at its current version) or skipped, or (``pending``) put
    them back; all or nothing. An item in ``expected`` changes only at that review version
    (else ReviewConflict, 409). Returns each item with its new version."""
    if status not in STATUSES:
        raise InputError(f"status is one of {', '.join(STATUSES)}, got {status!r}",
                         field="status")
    check_name(reviewer, "reviewer", optional=False)
    checked = _expected(items, expected)
    versions = _owned_items(store, owner, items)
    changed = store.set_review_status(owner, items, None if status == "pending" else status,
                                      reviewer=reviewer, versions=versions, expected=checked)
    return _versioned(changed)


def assign(store: Store, owner: str, items: Sequence[tuple[str, str]],
           assignee: str | None, *, expected: Mapping[tuple[str, str], int] | None = None
           ) -> list[dict[str, Any]]:
    """Assign items to a reviewer's name (None: to nobody); all or nothing, each item in
    ``expected`` only at that review version. Returns each item with its new version."""
    check_name(assignee, "assignee")
    checked = _expected(items, expected)
    _owned_items(store, owner, items)
    return _versioned(store.assign_review(owner, items, assignee, expected=checked))


def _versioned(versions: Mapping[tuple[str, str], int]) -> list[dict[str, Any]]:
    return [{"kind": kind, "id": item_id, "version": version}
            for (kind, item_id), version in versions.items()]
