"""The shared evaluator's steps without Dagster: a candidate, its benchmark and its release. The
pipeline's assets call them; the release's scoring of every trace is ``trace_scoring``'s, the one
scoring path.

pairs (opted-in traces split into training and benchmark, build, extract, cap) -> split -> job
(the worker trains the candidate) -> benchmark (candidate and incumbent score the benchmark pairs;
the gate decides) -> release. The worker runs through ``compute`` in between.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from stash_pipeline.compute.contract import (
    CHECKPOINT_INPUT,
    PAIR_REWARDS,
    JobSettings,
    job_directory,
    keep_only_logs,
    read_jsonl,
    write_job,
)
from stash_pipeline.compute.run import run_job
from stash_pipeline.core.errors import NotFoundError, StashError
from stash_pipeline.core.pair_builders import pair_tools
from stash_pipeline.core.pair_report import by_source
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.release_gate import BenchmarkOutcome, release_gate
from stash_pipeline.core.shared_data import (
    assign_roles,
    benchmark_pairs,
    check_disjoint,
    crossing_comparisons,
    not_trainable_advice,
)
from stash_pipeline.core.split import NotEnoughPairsError, PairSplit
from stash_pipeline.core.traces import Trace
from stash_pipeline.core.training_settings import DEFAULT_BASE_MODEL, DEFAULT_EPOCHS
from stash_pipeline.extraction.config import ExtractionConfig
from stash_pipeline.pipelines.training_pairs import TrainingPairs, training_pairs
from stash_pipeline.pipelines.worker_io import split_stored_pairs, traces_in_chunks
from stash_pipeline.store import BenchmarkComparison, Release, Store

SHARED_DIR = "shared-evaluator"  # under RM_ARTIFACT_DIR: <candidate>/train, benchmark-<evaluator>
AUDIENCE = "shared"
# Runs the worker on (job directory, checkpoint URI): a step's ``ComputeResource.worker``.
RunWorker = Callable[[Path, str], Any]


class GateError(StashError):
    """A release asked for without a passed gate, or after the incumbent changed."""


def candidate_version(run_id: str, created: datetime) -> str:
    """A candidate's id, and its release version if it passes: when its run began, and the run."""
    return f"{created:%Y%m%d-%H%M%S}-{run_id[:8]}"


# The candidate's data -------------------------------------------------------------------------

@dataclass(frozen=True)
class SharedData:
    training: TrainingPairs  # built, extracted, capped and split: what the candidate trains on
    benchmark: tuple[Pair, ...]
    report: dict[str, Any]


def assemble(store: Store, traces: Sequence[Trace], *, max_pairs: int,
             config: ExtractionConfig | None = None, extract: bool = True) -> SharedData:
    """The shared evaluator's data among ``traces`` (its opted-in ones): split into training and
    benchmark traces (the incumbent's training traces never benchmark), the training pairs built,
    extracted and capped (``training_pairs``), the benchmark pairs built, and no source trace in
    both (checked: OverlapError). ``pairs preview --shared`` calls it with ``extract=False``."""
    incumbent = store.latest_release()
    trained_before = (incumbent.data_snapshot.get("training_traces") or {}) if incumbent else {}
    feedback = store.feedback_for([t.id for t in traces])
    roles = assign_roles(traces, feedback, trained_before=trained_before)
    assembled = training_pairs(roles.training, feedback, audience=AUDIENCE, max_pairs=max_pairs,
                               extract=extract, config=config)
    benchmark = benchmark_pairs(roles.benchmark, feedback)
    if assembled.split is None:  # say why in the shared evaluator's terms
        assembled.report["error"] = str(NotEnoughPairsError(len(assembled.pairs),
                                                            not_trainable_advice(benchmark)))
    report = {
        **assembled.report, "incumbent": incumbent.version if incumbent else None,
        "opted_in_traces": len(roles.training) + len(roles.benchmark), **roles.counts(),
        "benchmark_pairs": len(benchmark), "benchmark_by_source": by_source(benchmark),
        "crossing_comparisons": crossing_comparisons(roles, feedback),
        **check_disjoint(assembled.pairs, benchmark),
    }
    return SharedData(assembled, tuple(benchmark), report)


def build_pairs(store: Store, candidate: str, *, max_pairs: int,
                config: ExtractionConfig | None = None) -> dict[str, Any]:
    """A new candidate's data from every opted-in trace (``assemble``), stored with it."""
    _require_unreleased(store, candidate)
    traces = list(traces_in_chunks(store, store.trace_ids(contribute=True)))
    data = assemble(store, traces, max_pairs=max_pairs, config=config)
    store.save_pairs(data.training.pairs, candidate=candidate)
    store.save_benchmark_pairs(data.benchmark, candidate=candidate)
    return {**data.report, "candidate": candidate}


def split(store: Store, candidate: str) -> PairSplit:
    """The one split (10% of source traces held out, seed 0) over the candidate's pairs;
    NotEnoughPairsError that says what the shared evaluator would train on."""
    try:
        return split_stored_pairs(store, candidate=candidate)
    except NotEnoughPairsError as error:
        advice = not_trainable_advice(store.load_pairs(candidate=candidate, split="benchmark"))
        raise NotEnoughPairsError(error.count, advice) from error


def write_training_job(store: Store, candidate: str, job_dir: Path, *,
                       base_model: str | None = None, epochs: int | None = None) -> JobSettings:
    """The worker's inputs: the split's pairs, rendered for the shared audience; the checkpoint
    is the only output (traces are scored once the candidate is released)."""
    excluded = len(store.load_pairs(candidate=candidate, split="excluded"))
    settings = JobSettings(evaluator=candidate, audience=AUDIENCE,
                           base_model=base_model or DEFAULT_BASE_MODEL,
                           epochs=epochs or DEFAULT_EPOCHS, outputs=("checkpoint",),
                           excluded_cross_trace_pairs=excluded)
    write_job(job_dir, settings, train_pairs=store.load_pairs(candidate=candidate, split="train"),
              eval_pairs=store.load_pairs(candidate=candidate, split="eval"))
    return settings


# The benchmark and the gate -------------------------------------------------------------------

def benchmark_rewards(store: Store, candidate: str, evaluator: str, checkpoint_uri: str,
                      run: RunWorker, artifact_dir: str | Path) -> dict[str, tuple[float, float]]:
    """{pair id: (r(chosen), r(rejected))} of the candidate's benchmark pairs by one checkpoint
    (the candidate's or the incumbent's), rendered for the shared audience."""
    pairs = store.load_pairs(candidate=candidate, split="benchmark")
    if not pairs:
        return {}
    settings = JobSettings(evaluator=evaluator, audience=AUDIENCE, checkpoint=CHECKPOINT_INPUT,
                           outputs=("pair_rewards",))
    rows = run_job(job_directory(artifact_dir, SHARED_DIR, candidate, f"benchmark-{evaluator}"),
                   lambda job_dir: write_job(job_dir, settings, benchmark_pairs=pairs),
                   lambda job_dir: run(job_dir, checkpoint_uri),
                   lambda job_dir: read_jsonl(job_dir / PAIR_REWARDS),
                   finished=keep_only_logs)  # the downloaded checkpoint goes; the log stays
    return {row["pair_id"]: (row["chosen"], row["rejected"]) for row in rows}


def decide(store: Store, candidate: str, *, incumbent: Release | None,
           candidate_rewards: Mapping[str, tuple[float, float]],
           incumbent_rewards: Mapping[str, tuple[float, float]],
           metrics: Mapping[str, Any]) -> BenchmarkComparison:
    """The release gate over the benchmark (``core.release_gate``), recorded in the store."""
    pairs = store.load_pairs(candidate=candidate, split="benchmark")
    outcomes = [BenchmarkOutcome(
        p.id, p.slices, candidate=_correct(candidate_rewards[p.id]),
        incumbent=_correct(incumbent_rewards[p.id]) if incumbent else None, tools=pair_tools(p))
        for p in pairs]
    trained = [*store.load_pairs(candidate=candidate, split="train"),
               *store.load_pairs(candidate=candidate, split="eval")]
    report = release_gate(
        outcomes, incumbent=incumbent.version if incumbent else None,
        reviewed_training_pairs=sum(p.source_kind == "reviewed_comparison" for p in trained),
        scores_actions=bool(metrics.get("action_scoring_version")))
    report.update(candidate=candidate, candidate_metrics=dict(metrics))
    return store.save_benchmark_comparison(candidate=candidate, incumbent=report["incumbent"],
                                           passed=report["passed"], report=report)


def _correct(rewards: tuple[float, float]) -> bool:
    chosen, rejected = rewards
    return chosen > rejected  # strictly, as eval_accuracy counts (a tie is a miss)


def gate_result(store: Store, candidate: str) -> BenchmarkComparison:
    """The candidate's latest benchmark comparison; NotFoundError before its benchmark ran."""
    comparisons = store.list_benchmark_comparisons(candidate)
    if not comparisons:
        raise NotFoundError(f"candidate {candidate} has no benchmark results yet")
    return comparisons[-1]


def release(store: Store, candidate: str, checkpoint_uri: str) -> Release:
    """Release a candidate that passed the gate against the current incumbent.

    Its data snapshot names the trace versions it trained on (the next candidates never
    benchmark on them) and the benchmark's traces.
    """
    _require_unreleased(store, candidate)
    comparison = gate_result(store, candidate)
    if not comparison.passed:
        raise GateError(f"candidate {candidate} did not pass the release gate: "
                        + "; ".join(comparison.report.get("reasons") or ()))
    current = store.latest_release()
    if (current.version if current else None) != comparison.incumbent:
        raise GateError(f"the incumbent changed since candidate {candidate} was benchmarked "
                        f"(then {comparison.incumbent}, now "
                        f"{current.version if current else None}); train a new candidate")
    snapshot = {
        "training_traces": _trace_versions(store.load_pairs(candidate=candidate)),
        "benchmark_traces": _trace_versions(store.load_pairs(candidate=candidate,
                                                             split="benchmark")),
    }
    return store.save_release(Release(candidate, checkpoint_uri, comparison.report, snapshot))


def is_released(store: Store, candidate: str) -> bool:
    return any(r.version == candidate for r in store.list_releases())


def _require_unreleased(store: Store, candidate: str) -> None:
    """A released candidate is final: its data and decision are what its release records."""
    if is_released(store, candidate):
        raise GateError(f"candidate {candidate} is already released; start a new run to train "
                        "another candidate")


def _trace_versions(pairs: Sequence[Any]) -> dict[str, int]:
    versions: dict[str, int] = {}
    for pair in pairs:
        for side in (pair.chosen, pair.rejected):
            versions[side.trace.id] = side.trace.version
    return versions
