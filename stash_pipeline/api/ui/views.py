"""What the viewer's pages show of one trace: its evaluators' action credit, its actions as cells
of the heatmap and badges beside the messages. The trace page, the review queue's item page and
the side-by-side page render the same view (``templates/_trace.html``)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.services import reward_models, traces
from stash_pipeline.store import Store

# What a form on the trace page did, as the page then says it (the side-by-side page too, where
# a comparison is made from its picker).
TRACE_DONE = {
    "comment": "Saved: your comment.",
    "compare": "Saved: your comparison. It stays pending until a reviewer other than you "
               "approves it.",
    "contribute-on": "This trace now contributes to shared-evaluator training.",
    "contribute-off": "This trace no longer contributes: it is left out of future candidates "
                      "(what released weights learned stays).",
}


def models_of(store: Store, owner: str) -> list[Any]:
    """The owner's reward models (none for an account from before the rollout)."""
    try:
        return reward_models.list_models(store, owner)
    except NotFoundError:
        return []


def evaluators_of(detail: dict[str, Any], names: dict[str, str], *,
                  whole_trace_only: bool = False) -> list[dict[str, Any]]:
    """The evaluators with action credit on this trace, the shared release first; with
    ``whole_trace_only``, after them those that scored the whole trace only (``credits`` empty).
    Each carries its whole-trace ``score`` (raw, calibrated) or None."""
    found: dict[str, dict[str, Any]] = {}

    def entry(evaluator: str, kind: str) -> dict[str, Any]:
        return found.setdefault(evaluator, {
            "id": evaluator, "kind": kind, "credits": {},
            "label": (f"shared evaluator {evaluator}" if kind == "shared"
                      else f"personal: {names.get(evaluator, evaluator)}")})

    for score in detail["action_scores"]:
        entry(score["evaluator"], score["kind"])["credits"][score["action_id"]] = score["credit"]
    whole = {s["evaluator"]: s for s in detail["scores"]}
    if whole_trace_only:
        for score in detail["scores"]:
            if score["evaluator"] not in found:
                entry(score["evaluator"], score["kind"])["label"] += " (whole trace only)"
    for evaluator in found.values():
        evaluator["score"] = whole.get(evaluator["id"])
    release = detail["shared_evaluator"]["release"]
    return sorted(found.values(), key=lambda e: (not e["credits"], e["id"] != release,
                                                 e["kind"] != "shared", e["label"]))


def trace_view(store: Store, owner: str, trace_id: str, *, evaluator: str | None = None,
               names: dict[str, str] | None = None,
               whole_trace_only: bool = False) -> dict[str, Any]:
    """One trace of the owner's as the pages show it, under ``evaluator`` (default: the shared
    release, else the first evaluator with action credit on it); with ``whole_trace_only`` an
    evaluator that scored the whole trace only may be chosen too (it shows no credit).
    ``comparable`` is every evaluator that scored the trace, whole or by action."""
    detail = traces.detail(store, owner, trace_id)
    if names is None:
        names = {m.id: m.name for m in models_of(store, owner)}
    comparable = evaluators_of(detail, names, whole_trace_only=True)
    evaluators = comparable if whole_trace_only else [e for e in comparable if e["credits"]]
    selected = next((e for e in evaluators if e["id"] == evaluator), None) or (
        evaluators[0] if evaluators else None)
    credits = selected["credits"] if selected else {}
    by_message: dict[int, list[dict[str, Any]]] = defaultdict(list)
    cells = []
    for action in detail["actions"]:
        cell = {**action, "credit": credits.get(action["id"]),
                "label": action["tool_name"] and f"{action['local_id']} {action['tool_name']}"
                or action["local_id"]}
        by_message[action["message_index"]].append(cell)
        cells.append(cell)
    scored = [c["credit"] for c in cells if c["credit"] is not None]
    return {"trace": detail, "evaluators": evaluators, "comparable": comparable,
            "selected": selected, "cells": cells,
            "by_message": by_message, "names": names,
            "mean_credit": sum(scored) / len(scored) if scored else None,
            "scored": len(scored)}
