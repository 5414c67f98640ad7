"""Writing a job directory's outputs (docs/worker.md): score rows, pair rewards, the loss of every
step and metrics.json. Each file is written beside its name and renamed into place; the checkpoint
itself is ``checkpoint.py``'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from stash_pipeline.compute import contract
from stash_pipeline.core.calibration import RewardStats, action_credit, calibrated_score
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.traces import Trace


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with contract.atomic_path(path) as partial:
        partial.write_text("".join(json.dumps(row) + "\n" for row in rows))


def write_trace_scores(job_dir: Path, evaluator: str, traces: Sequence[Trace],
                       rewards: Mapping[str, float], stats: RewardStats,
                       lengths: Mapping[str, int] | None = None,
                       untrained: Mapping[str, float] | None = None) -> int:
    """scores.jsonl: every trace's raw reward and its calibrated score, with ``input_tokens``
    (its rendering's length before the window cut) when ``lengths`` has it and ``untrained``
    (the untrained base's raw reward, a training job's) when ``untrained`` has it; the number
    of rows."""
    lengths, untrained = lengths or {}, untrained or {}
    write_jsonl(job_dir / contract.SCORES, [
        {"trace_id": t.id, "trace_version": t.version, "evaluator": evaluator,
         "score": rewards[t.id], "calibrated": calibrated_score(rewards[t.id], stats),
         "input_tokens": lengths.get(t.id), "untrained": untrained.get(t.id)}
        for t in traces])
    return len(traces)


def write_action_scores(job_dir: Path, evaluator: str, traces: Sequence[Trace],
                        raw: Mapping[str, float], action_stats: RewardStats,
                        lengths: Mapping[str, int] | None = None) -> int:
    """action_scores.jsonl: every action's raw reward and its credit, with ``input_tokens`` as
    the scores'; the number of rows."""
    lengths = lengths or {}
    rows = [{"trace_id": t.id, "trace_version": t.version, "action_id": a.id,
             "evaluator": evaluator, "raw_reward": raw[a.id],
             "credit": action_credit(raw[a.id], action_stats), "input_tokens": lengths.get(a.id)}
            for t in traces for a in t.actions()]
    write_jsonl(job_dir / contract.ACTION_SCORES, rows)
    return len(rows)


def write_finished(job_dir: Path, traces: Sequence[Trace]) -> None:
    """finished_traces.jsonl: the traces a budgeted scoring job finished, at their versions."""
    write_jsonl(job_dir / contract.FINISHED, [{"trace_id": t.id, "trace_version": t.version}
                                              for t in traces])


def write_pair_rewards(job_dir: Path, pairs: Sequence[Pair],
                       rewards: Sequence[tuple[float, float]]) -> int:
    """pair_rewards.jsonl: r(chosen) and r(rejected) of every benchmark pair; the number of rows."""
    write_jsonl(job_dir / contract.PAIR_REWARDS, [
        {"pair_id": pair.id, "chosen": chosen, "rejected": rejected}
        for pair, (chosen, rejected) in zip(pairs, rewards)])
    return len(pairs)


def write_losses(job_dir: Path, step_losses: Sequence[float]) -> None:
    """losses.json: the loss of every training step (it stays in scratch; the metrics carry the
    downsampled curve)."""
    (job_dir / contract.LOSSES).write_text(json.dumps(list(step_losses)))


def write_metrics(job_dir: Path, metrics: Mapping[str, Any]) -> None:
    """metrics.json, the success mark: written last by the job, whole or not at all."""
    with contract.atomic_path(job_dir / contract.METRICS) as partial:
        partial.write_text(json.dumps(metrics, indent=2))
