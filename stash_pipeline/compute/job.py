"""The job directory contract between a caller (Dagster, Modal) and the worker process.

This module is torch-free: the caller imports it to write a job and read its results; the worker
(``runner.py``) runs it. Layout of ``RM_ARTIFACT_DIR/<job>/`` (docs/worker.md has the full contract):

inputs   settings.json; train_pairs, eval_pairs, score_traces, benchmark_pairs: Hugging Face
         datasets saved with ``save_to_disk`` (column ``pair`` / ``trace``: the core JSON form as a
         string), or the same rows as ``<name>.jsonl``, which the worker turns into the dataset
         before it starts
outputs  metrics.json (written last), scores.jsonl, action_scores.jsonl, pair_rewards.jsonl,
         reward-model/, reward-model.tar.gz, worker.log (ends with the reason when the job failed)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.serialize import trace_to_dict
from stash_pipeline.core.traces import Trace
from stash_pipeline.core.pair_builders import AUDIENCES, Audience
from stash_pipeline.core.training_settings import ERROR_TAIL_CHARS, MAX_LENGTH

SETTINGS = "settings.json"
TRAIN_PAIRS, EVAL_PAIRS, SCORE_TRACES = "train_pairs", "eval_pairs", "score_traces"
# Pairs only scored, never trained on: the shared evaluator's benchmark (pair_rewards.jsonl).
BENCHMARK_PAIRS = "benchmark_pairs"
PAIR_REWARDS = "pair_rewards.jsonl"
PAIR_COLUMN, TRACE_COLUMN = "pair", "trace"
METRICS, SCORES, ACTION_SCORES, LOG = "metrics.json", "scores.jsonl", "action_scores.jsonl", "worker.log"
LOSSES = "losses.json"  # the Bradley-Terry loss of every training step, for the loss curve
CHECKPOINT_DIR, ARCHIVE_NAME = "reward-model", "reward-model.tar.gz"  # outputs of a training job
# A scoring-only job's checkpoint, when the caller downloads it into the job directory.
CHECKPOINT_INPUT = "checkpoint.tar.gz"
INPUT_FILES = (SETTINGS, *(f"{name}.jsonl" for name in (TRAIN_PAIRS, EVAL_PAIRS, SCORE_TRACES,
                                                        BENCHMARK_PAIRS)))
OUTPUT_KINDS: tuple[str, ...] = ("checkpoint", "scores", "action_scores", "pair_rewards")
DEFAULT_OUTPUTS: tuple[str, ...] = ("checkpoint", "scores", "action_scores")


@dataclass(frozen=True)
class JobSettings:
    """settings.json. A training job names ``base_model``; a scoring-only job names ``checkpoint``."""

    evaluator: str  # tags every score: a shared release version or a personal model id
    audience: Audience = "personal"
    base_model: str | None = None  # Hugging Face id or local path
    checkpoint: str | None = None  # a reward-model/ directory or reward-model.tar.gz
    epochs: int = 1
    seed: int = 0
    outputs: tuple[str, ...] = DEFAULT_OUTPUTS
    excluded_cross_trace_pairs: int = 0  # from the split, reported in metrics
    max_length: int = MAX_LENGTH

    @property
    def is_training(self) -> bool:
        return self.base_model is not None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outputs"] = list(self.outputs)
        return data

    @classmethod
    def from_dict(cls, data: Any) -> JobSettings:
        """Validated settings; an error names settings.json and the field."""
        def fail(name: str, message: str) -> InputError:
            return InputError(message, file=SETTINGS, field=name)

        if not isinstance(data, dict):
            raise InputError("expected a JSON object", file=SETTINGS)
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise fail(unknown[0], "unknown setting")
        if not isinstance(data.get("evaluator"), str) or not data["evaluator"]:
            raise fail("evaluator", "expected a non-empty string")
        if data.get("audience", "personal") not in AUDIENCES:
            raise fail("audience", f"expected one of {AUDIENCES}")
        if (data.get("base_model") is None) == (data.get("checkpoint") is None):
            raise fail("base_model", "give exactly one of base_model (train) and checkpoint (score only)")
        for name in ("base_model", "checkpoint"):
            if data.get(name) is not None and (not isinstance(data[name], str) or not data[name]):
                raise fail(name, "expected a non-empty string")
        for name, least in (("epochs", 1), ("seed", 0), ("excluded_cross_trace_pairs", 0), ("max_length", 1)):
            value = data.get(name, cls.__dataclass_fields__[name].default)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise fail(name, f"expected an integer of at least {least}, got {value!r}")
        outputs = data.get("outputs", list(DEFAULT_OUTPUTS))
        if not isinstance(outputs, list) or any(o not in OUTPUT_KINDS for o in outputs):
            raise fail("outputs", f"expected a list drawn from {OUTPUT_KINDS}")
        if "checkpoint" in outputs and data.get("base_model") is None:
            raise fail("outputs", "a scoring-only job writes no checkpoint")
        return cls(**{**data, "outputs": tuple(outputs)})


def write_job(job_dir: Path, settings: JobSettings, *, train_pairs: Iterable[Pair] = (),
              eval_pairs: Iterable[Pair] = (), score_traces: Iterable[Trace] = (),
              benchmark_pairs: Iterable[Pair] = ()) -> Path:
    """Write a job's inputs (JSON Lines; the worker makes them datasets). Needs no ML libraries."""
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / SETTINGS).write_text(json.dumps(settings.to_dict(), indent=2))
    rows = {
        TRAIN_PAIRS: (json.dumps(p.to_dict()) for p in train_pairs),
        EVAL_PAIRS: (json.dumps(p.to_dict()) for p in eval_pairs),
        SCORE_TRACES: (json.dumps(trace_to_dict(t)) for t in score_traces),
        BENCHMARK_PAIRS: (json.dumps(p.to_dict()) for p in benchmark_pairs),
    }
    for name, lines in rows.items():
        with (job_dir / f"{name}.jsonl").open("w") as out:
            for line in lines:
                out.write(line + "\n")
    return job_dir


def read_settings(job_dir: Path) -> JobSettings:
    path = job_dir / SETTINGS
    if not path.is_file():
        raise InputError("missing: every job needs its settings", file=str(path))
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise InputError(f"not JSON: {error}", file=SETTINGS) from error
    return JobSettings.from_dict(data)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def failure_reason(job_dir: Path, exit_code: int | None = None) -> str:
    """What a failed model's ``error`` holds: the last 2000 characters of worker.log.

    A worker killed by a signal (negative exit status) cannot say so itself after a ``kill -9``:
    the caller's exit status does, as the last line.
    """
    path = job_dir / LOG
    text = path.read_text(errors="replace") if path.is_file() else "worker.log missing"
    if exit_code is not None and exit_code < 0:
        text = f"{text.rstrip()}\nworker killed (signal {-exit_code})"
    return text[-ERROR_TAIL_CHARS:]


# How often the worker in the Modal function uploads its Pipes messages to S3.
PIPES_S3_INTERVAL_S = 2.0


def pipes_message_writer(environ: Mapping[str, str] | None = None) -> Any:
    """The worker's Pipes message writer: S3 when the launcher's parameters name a bucket (the
    Modal function, whose progress travels through the object store), else None (Pipes' default)."""
    from dagster_pipes import DAGSTER_PIPES_MESSAGES_ENV_VAR, PipesS3MessageWriter, decode_param

    environ = os.environ if environ is None else environ
    encoded = environ.get(DAGSTER_PIPES_MESSAGES_ENV_VAR)
    if not encoded or "bucket" not in decode_param(encoded):
        return None
    from stash_pipeline.objects import object_store_from_env

    return PipesS3MessageWriter(object_store_from_env(environ, require_s3=True).client,
                                interval=PIPES_S3_INTERVAL_S)
