"""Which candidate a step works on: the one its run (or the run it re-executes) started.

``shared_training_pairs`` names a new candidate after the first run of its run family (a
re-execution keeps the root run's candidate) and records it in its metadata; every later step
reads it back from there, so a step materialised on its own works on the latest candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dagster as dg

from stash_pipeline.pipelines import shared_evaluator as steps

PAIRS_KEY = dg.AssetKey("shared_training_pairs")
CANDIDATE = "candidate"  # the metadata entry that names it
LOOKBACK = 50  # recent materialisations searched for this run's own candidate


def new_candidate(context: Any) -> str:
    root = context.run.root_run_id or context.run.run_id
    record = context.instance.get_run_record_by_id(root)
    return steps.candidate_version(root, record.create_timestamp)


def current_candidate(context: Any) -> str:
    family = {context.run.run_id, context.run.root_run_id, context.run.parent_run_id} - {None}
    records = _recent_pairs(context.instance)
    if not records:
        raise dg.Failure(description="no shared-evaluator candidate yet: materialise "
                                     "shared_training_pairs first (the whole chain does)")
    own = next((r for r in records if r.run_id in family), records[0])
    return own.asset_materialization.metadata[CANDIDATE].value


def candidate_of_run(instance: dg.DagsterInstance, run_id: str) -> str | None:
    """The candidate a run named, or None when it failed before naming one."""
    own = next((r for r in _recent_pairs(instance) if r.run_id == run_id), None)
    return None if own is None else own.asset_materialization.metadata[CANDIDATE].value


def _recent_pairs(instance: dg.DagsterInstance) -> Sequence[Any]:
    return instance.fetch_materializations(PAIRS_KEY, limit=LOOKBACK).records
