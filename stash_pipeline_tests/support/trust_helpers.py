"""A world for the trust report's tests (API, SQL endpoint, viewer): an account with 40 traces in
two agents, three domains and two tools, verified outcomes (metadata.outcome) and ratings; a
succeeded personal model that trained on two of them, held out three pairs and scored all 40; and
a release, benchmarked on 40 pairs, that scored every action."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import httpx

from stash_pipeline.core.feedback import Rating, feedback_id
from stash_pipeline.core.pair_builders import build_feedback_pairs
from stash_pipeline.core.release_gate import BenchmarkOutcome, release_gate
from stash_pipeline.objects import reward_model_checkpoint_key
from stash_pipeline.services import accounts
from stash_pipeline.store import ActionScore, Release, TraceScore
from stash_pipeline_tests.support.api_helpers import Api, checkpoint_archive, trace_object

RELEASE = "20260201-000000-trust000"
COUNT = 40
TRAINED = ("t00", "t15")  # one task and domain: their trace ratings make a pair
WINDOW = 512


def trace_id(i: int) -> str:
    return f"t{i:02d}"


def succeeded(i: int) -> bool:
    return (i * 7) % 10 < 6


def raw_score(i: int) -> float:
    """Higher for succeeded traces, with overlap: the AUC is above chance, far from 1."""
    return (0.5 if succeeded(i) else 0.0) + ((i * 37) % 17) / 10 - 0.8


def body(i: int) -> dict:
    trace = trace_object(trace_id(i), text=f"Order {i}, please.", turns=1 + i % 3)
    trace["agent"] = "support" if i % 2 else "sales"
    trace["domain"] = ("retail", "airline", "telecom")[i % 3]
    trace["metadata"] = {"task_id": f"task-{i % 5}", "outcome": 1.0 if succeeded(i) else 0.0}
    if i % 4 == 1:
        for message in trace["messages"]:
            for call in message.get("tool_calls", ()):
                call["function"]["name"] = "refund"
    return trace


@dataclass
class TrustWorld:
    owner: str
    key: str
    client: httpx.Client
    model_id: str


def trust_world(api: Api, tmp_path: Path, name: str = "ana") -> TrustWorld:
    account, key = accounts.create(api.store, name)
    owner, client = account.id, api.client(key)
    lines = "\n".join(json.dumps(body(i)) for i in range(COUNT)) + "\n"
    imported = client.post("/api/v1/traces", content=lines,
                           headers={"Content-Type": "application/x-ndjson"})
    assert imported.status_code == 200, imported.text
    store = api.store
    traces = {t.id: t for t in store.get_traces([trace_id(i) for i in range(COUNT)])}
    ratings = [Rating(feedback_id("rating", trace_id(i)), trace_id(i),
                      float(round(raw_score(i) * 2) + (i % 2)), author=name)
               for i in range(0, COUNT, 3)]
    store.add_feedback(ratings, owner=owner)
    model = client.post("/api/v1/rm/reward-models",
                        json={"name": "refunds", "trace_ids": list(TRAINED)}).json()["id"]
    pairs = build_feedback_pairs([traces[t] for t in TRAINED],
                                 [r for r in ratings if r.trace_id in TRAINED])
    assert pairs
    store.save_pairs(pairs, reward_model_id=model)
    store.save_split({p.id: "train" for p in pairs}, reward_model_id=model)
    _succeed(api, model, traces, tmp_path)
    _release(api, traces)
    return TrustWorld(owner, key, client, model)


def _succeed(api: Api, model: str, traces: dict, tmp_path: Path) -> None:
    """The model succeeds as the pipeline stores it: metrics, checkpoint and scores of every
    trace (input_tokens from 300 up: most are longer than the 512-token window)."""
    archive = tmp_path / f"{model}.tar.gz"
    archive.write_bytes(checkpoint_archive())
    attempt = api.store.mark_running(model)
    uri = api.objects.put_file(reward_model_checkpoint_key(model, attempt), archive)
    api.store.mark_succeeded(
        model, metrics=METRICS, checkpoint_uri=uri,
        scores=[TraceScore(trace_id(i), 1, model, raw_score(i),
                           1 / (1 + math.exp(-raw_score(i))), input_tokens=300 + 60 * i)
                for i in range(COUNT)],
        scored={trace_id(i): 1 for i in range(COUNT)},
        action_scores=[ActionScore(a.id, t.id, 1, model, raw_score(int(t.id[1:])),
                                   math.tanh(raw_score(int(t.id[1:])) / 2), input_tokens=400)
                       for t in traces.values() for a in t.actions()])


def _release(api: Api, traces: dict) -> None:
    outcomes = [BenchmarkOutcome(f"p{i}", {"tool": "get_order", "domain": "retail",
                                           "agent": "support"}, candidate=i % 5 != 0)
                for i in range(40)]
    report = release_gate(outcomes, incumbent=None, reviewed_training_pairs=3,
                          scores_actions=True)
    report["candidate_metrics"] = {"max_length": WINDOW, "num_pairs": 120, "truncated_pairs": 30}
    api.store.save_benchmark_comparison(candidate=RELEASE, incumbent=None, passed=True,
                                        report=report)
    api.store.save_release(Release(RELEASE, "file:///nowhere", report,
                                   {"training_traces": {"t02": 1}}))
    for t in traces.values():
        i = int(t.id[1:])
        credit = math.tanh((0.3 if succeeded(i) else -0.1) + ((i * 13) % 7 - 3) / 10)
        api.store.save_action_scores(RELEASE, {t.id: 1}, [
            ActionScore(a.id, t.id, 1, RELEASE, credit, credit, input_tokens=200 + 40 * i)
            for a in t.actions()])


# Three held-out pairs, all right: the seed's "handful".
METRICS = {"train_pairs": 8, "eval_pairs": 3, "eval_accuracy": 1.0, "num_pairs": 11,
           "final_loss": 0.69, "epochs": 1, "device": "cpu", "seconds": 2.0,
           "excluded_cross_trace_pairs": 0, "max_length": WINDOW, "truncated_pairs": 4,
           "truncated_traces": 31, "truncated_actions": 0,
           "eval_slices": [{"slice": "tool", "value": "get_order", "pairs": 2, "correct": 2},
                           {"slice": "domain", "value": "retail", "pairs": 3, "correct": 3}],
           "loss_curve": [0.6931, 0.6930, 0.6931]}
