"""The trust report's baselines on real tau2-bench traces (../shared/data): three airline runs of
different agents on the same 50 tasks, so each task has several traces with verified outcomes. A
tiny random model trained on one task's outcome pairs scored every trace; the report's trace-
length baseline, its direction, its tasks and the verdict are recomputed here from the imported
traces, independently of the report's code (a naive double loop for each AUC)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from stash_pipeline.core.feedback import VerifiedOutcome
from stash_pipeline.core.pair_builders import build_feedback_pairs
from stash_pipeline.core.requests import parse_reward_model_request
from stash_pipeline.core.trust import figures_of
from stash_pipeline.services import accounts, trust as trust_service
from stash_pipeline.store import Store, TraceScore
from stash_pipeline_tests.support.importer_helpers import read_all, shared_data

RUNS = ("airline_gpt-4.1.json", "airline_gpt-4.1-sft.json", "airline_gpt-4o_azure.json")


def _naive_auc(wins: list[float], losses: list[float]) -> float:
    return sum(1.0 if w > x else 0.5 if w == x else 0.0
               for w in wins for x in losses) / (len(wins) * len(losses))


def _overall(report: dict, metric: str) -> dict:
    return next(f for f in figures_of(report, metric) if f["slice_kind"] == "all")


def test_the_length_baseline_on_real_tau2_traces_is_recomputed_exactly(store: Store):
    account, _ = accounts.create(store, "ana")
    records = [r for run in RUNS for r in read_all(shared_data("tau2-bench", "runs", run))]
    records = [dataclasses.replace(r, trace=dataclasses.replace(r.trace, owner=account.id))
               for r in records]
    store.import_traces(records)
    traces = {r.trace.id: r.trace for r in records}
    outcomes = {}
    for r in records:
        for item in r.feedback:
            if isinstance(item, VerifiedOutcome):
                outcomes[r.trace.id] = outcomes.get(r.trace.id, True) and item.reward >= 1.0
    # Trained on one task's traces with both outcomes: their outcome pairs.
    by_task: dict[str, list[str]] = {}
    for trace_id in outcomes:
        by_task.setdefault(traces[trace_id].metadata["task_id"], []).append(trace_id)
    task = next(t for t, ids in sorted(by_task.items())
                if len({outcomes[i] for i in ids}) == 2)
    trained = by_task[task]
    model = store.create_reward_model(account.id, parse_reward_model_request(
        {"name": "tiny", "trace_ids": trained}))
    pairs = build_feedback_pairs([traces[t] for t in trained],
                                 [f for r in records if r.trace.id in trained for f in r.feedback])
    assert pairs
    store.save_pairs(pairs, reward_model_id=model.id)
    store.save_split({p.id: "train" for p in pairs}, reward_model_id=model.id)
    rng = random.Random(0)
    raw = {t: rng.gauss(0.0, 0.02) for t in traces}  # a tiny random model's scores
    base = {t: rng.gauss(0.0, 1.0) for t in list(traces)[::2]}  # the untrained base's, on half
    store.mark_running(model.id)
    store.mark_succeeded(model.id, checkpoint_uri="file:///x", scored={t: 1 for t in traces},
                         metrics={"eval_pairs": 0, "eval_accuracy": None},
                         scores=[TraceScore(t, 1, model.id, v, 0.5 + v) for t, v in raw.items()],
                         untrained=[TraceScore(t, 1, model.id, v) for t, v in base.items()])

    report = trust_service.model_report(store, account.id, model.id)

    left_out = {t for p in pairs for t in p.source_trace_ids}
    evaluated = [t for t in outcomes if t not in left_out]
    length = {t: len(traces[t].messages) for t in traces}
    trained_wins = [length[t] for t in left_out if outcomes.get(t)]
    trained_losses = [length[t] for t in left_out if outcomes.get(t) is False]
    shorter = _naive_auc(trained_wins, trained_losses) <= 0.5
    sign = -1.0 if shorter else 1.0
    wins = [t for t in evaluated if outcomes[t]]
    losses = [t for t in evaluated if not outcomes[t]]
    baseline = _overall(report, "baseline_length_auc")
    assert baseline["detail"]["direction"] == ("shorter" if shorter else "longer")
    assert baseline["value"] == pytest.approx(
        _naive_auc([sign * length[t] for t in wins], [sign * length[t] for t in losses]))
    model_auc = _naive_auc([raw[t] for t in wins], [raw[t] for t in losses])
    assert _overall(report, "outcome_auc_trace_score")["value"] == pytest.approx(model_auc)
    assert baseline["detail"]["difference"] == pytest.approx(model_auc - baseline["value"])
    assert baseline["n"] == len(evaluated)
    tasks = {traces[t].metadata["task_id"] for t in evaluated}
    assert baseline["detail"]["groups"] == len(tasks) >= 40
    # Within a task: every (succeeded, failed) pair of traces of one task.
    pairs_within = [(w, x) for w in wins for x in losses
                    if traces[w].metadata["task_id"] == traces[x].metadata["task_id"]]
    within = _overall(report, "baseline_length_within_task")
    assert within["detail"]["pairs"] == len(pairs_within)
    assert within["value"] == pytest.approx(_naive_auc_pairs(
        [(sign * length[w], sign * length[x]) for w, x in pairs_within]))
    # The untrained base: on the traces it scored, the model's figure on exactly those beside it.
    untrained = _overall(report, "baseline_untrained_auc")
    scored_wins = [t for t in wins if t in base]
    scored_losses = [t for t in losses if t in base]
    assert untrained["n"] == len(scored_wins) + len(scored_losses)
    assert untrained["value"] == pytest.approx(
        _naive_auc([base[t] for t in scored_wins], [base[t] for t in scored_losses]))
    assert untrained["detail"]["model"] == pytest.approx(
        _naive_auc([raw[t] for t in scored_wins], [raw[t] for t in scored_losses]))
    assert {b["metric"] for b in report["verdict"]["baselines"]} == {
        "baseline_length_auc", "baseline_untrained_auc"}
    assert not report["verdict"]["beats_baselines"] and report["verdict"]["judged"]


def _naive_auc_pairs(pairs: list[tuple[float, float]]) -> float:
    return sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in pairs) / len(pairs)
