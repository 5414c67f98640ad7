"""The job directory contract between a caller (Dagster, Modal) and the worker process: what a job
directory holds, its settings, and writing and clearing it (``worker_log`` reads and writes its
``worker.log``). A job (a worker job) is one run of the worker on one such directory; the only
other jobs are Dagster's (``defs/*/jobs.py``: the assets a run materializes).

This module is torch-free: the caller imports it to write a job and read its results; the worker
(``runner.py``) runs it. Layout of ``RM_ARTIFACT_DIR/<job>/`` (docs/worker.md has the full
contract):

inputs   settings.json; train_pairs, eval_pairs, score_traces, benchmark_pairs: Hugging Face
         datasets saved with ``save_to_disk`` (column ``pair`` / ``trace``: the core JSON form as a
         string), or the same rows as ``<name>.jsonl``, which the worker turns into the dataset
         before it starts
outputs  metrics.json (written last, with the attempt id), scores.jsonl, action_scores.jsonl,
         finished_traces.jsonl (a scoring job with a work budget), pair_rewards.jsonl,
         losses.json, reward-model/, reward-model.tar.gz, worker.log (every phase with its
         duration; ends with the reason when the job failed), attempt-logs/ (the logs of
         earlier attempts), upload.json (the caller's: where the archive was uploaded)

Every attempt starts from a clean output state: ``write_job`` (the only function that clears a job
directory for a new job) and the worker both remove the outputs of an earlier attempt, so an old
success is never read as a new one; ``attempt-logs/`` stays.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from stash_pipeline.compute.worker_log import ATTEMPT_LOGS, LOG, retire_log
from stash_pipeline.core.errors import InputError, StorageFullError, disk_full
from stash_pipeline.core.pair_builders import AUDIENCES, Audience
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.serialize import trace_to_dict
from stash_pipeline.core.traces import Trace
from stash_pipeline.core.training_settings import ARCHIVE_NAME, CHECKPOINT_DIR, MAX_LENGTH

SETTINGS = "settings.json"
TRAIN_PAIRS, EVAL_PAIRS, SCORE_TRACES = "train_pairs", "eval_pairs", "score_traces"
# Pairs only scored, never trained on: the shared evaluator's benchmark (pair_rewards.jsonl).
BENCHMARK_PAIRS = "benchmark_pairs"
PAIR_REWARDS = "pair_rewards.jsonl"
INPUT_DATASETS = (TRAIN_PAIRS, EVAL_PAIRS, SCORE_TRACES, BENCHMARK_PAIRS)
PAIR_COLUMN, TRACE_COLUMN = "pair", "trace"
METRICS, SCORES, ACTION_SCORES = "metrics.json", "scores.jsonl", "action_scores.jsonl"
LOSSES = "losses.json"  # the Bradley-Terry loss of every training step, for the loss curve
# The traces a scoring job with a work budget finished ({trace_id, trace_version} a line): its
# scores and action scores cover exactly these; the rest were not started (a job's budget spent).
FINISHED = "finished_traces.jsonl"
# A scoring-only job's checkpoint, when the caller downloads it into the job directory.
CHECKPOINT_INPUT = "checkpoint.tar.gz"
UPLOAD = "upload.json"  # {"uri": ..., "seconds": ...} once the checkpoint is in the object store
INPUT_FILES = (SETTINGS, *(f"{name}.jsonl" for name in INPUT_DATASETS))
# Everything an attempt writes; each attempt starts without them (CHECKPOINT_DIR and ARCHIVE_NAME,
# a training job's, are the seed's names: core.training_settings). "*.partial" names are the
# temporaries that atomic writes rename into place.
OUTPUTS = (METRICS, SCORES, ACTION_SCORES, FINISHED, PAIR_REWARDS, LOSSES, CHECKPOINT_DIR,
           ARCHIVE_NAME, UPLOAD)
PARTIAL = ".partial"
OUTPUT_KINDS: tuple[str, ...] = ("checkpoint", "scores", "action_scores", "pair_rewards")
DEFAULT_OUTPUTS: tuple[str, ...] = ("checkpoint", "scores", "action_scores")
# checkpoint_dtype "auto": the base model's own dtype (Qwen3-0.6B ships bf16), float32 if it has
# none.
CHECKPOINT_DTYPES = ("auto", "float32", "bfloat16", "float16")
# score_dtype "auto": bf16 weights on an accelerator that supports them, float32 elsewhere.
SCORE_DTYPES = ("auto", "float32", "bfloat16")



@dataclass(frozen=True)
class JobSettings:
    """settings.json. A training job names ``base_model``; a scoring-only job names
    ``checkpoint``."""

    evaluator: str  # tags every score: a shared release version or a personal model id
    # None: personal for a training job; for a scoring-only job the audience the checkpoint was
    # trained for (reward_stats.json records it). A scoring job naming another audience fails.
    audience: Audience | None = None
    base_model: str | None = None  # Hugging Face id or local path
    checkpoint: str | None = None  # a reward-model/ directory or reward-model.tar.gz
    epochs: int = 1
    seed: int = 0
    outputs: tuple[str, ...] = DEFAULT_OUTPUTS
    excluded_cross_trace_pairs: int = 0  # from the split, reported in metrics
    # The window asked for; the worker records the one it used (less for a model with fewer
    # positions: BERT's 512) here and in metrics.json.
    max_length: int = MAX_LENGTH
    attempt: str | None = None  # copied into metrics.json; write_job draws one when None
    checkpoint_dtype: str = "auto"
    score_dtype: str = "auto"
    # A scoring-only job's work budget (a background chunk's STASH_CHUNK_SECONDS): it scores its
    # traces in groups and starts no group once this many seconds of the job are spent (or the
    # group would overrun them at the speed measured so far), the first group always; the
    # traces it finished are listed in finished_traces.jsonl. None: every trace.
    work_seconds: float | None = None

    @property
    def is_training(self) -> bool:
        return self.base_model is not None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outputs"] = list(self.outputs)
        if data["work_seconds"] is None:  # a worker from before budgets reads these settings
            del data["work_seconds"]
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
        if data.get("audience") is not None and data["audience"] not in AUDIENCES:
            raise fail("audience", f"expected one of {AUDIENCES} or null")
        if (data.get("base_model") is None) == (data.get("checkpoint") is None):
            raise fail("base_model",
                       "give exactly one of base_model (train) and checkpoint (score only)")
        for name in ("base_model", "checkpoint", "attempt"):
            if data.get(name) is not None and (not isinstance(data[name], str) or not data[name]):
                raise fail(name, "expected a non-empty string")
        for name in ("epochs", "seed", "excluded_cross_trace_pairs", "max_length"):
            least = 1 if name in ("epochs", "max_length") else 0
            value = data.get(name, cls.__dataclass_fields__[name].default)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise fail(name, f"expected an integer of at least {least}, got {value!r}")
        budget = data.get("work_seconds")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int | float)
                                   or not budget > 0):
            raise fail("work_seconds", f"expected a positive number of seconds or null, "
                                       f"got {budget!r}")
        if budget is not None and data.get("base_model") is not None:
            raise fail("work_seconds", "a training job scores every trace it is given: only a "
                                       "scoring-only job has a work budget")
        for name, allowed in (("checkpoint_dtype", CHECKPOINT_DTYPES),
                              ("score_dtype", SCORE_DTYPES)):
            if data.get(name, "auto") not in allowed:
                raise fail(name, f"expected one of {allowed}, got {data[name]!r}")
        outputs = data.get("outputs", list(DEFAULT_OUTPUTS))
        if not isinstance(outputs, list) or any(o not in OUTPUT_KINDS for o in outputs):
            raise fail("outputs", f"expected a list drawn from {OUTPUT_KINDS}")
        if "checkpoint" in outputs and data.get("base_model") is None:
            raise fail("outputs", "a scoring-only job writes no checkpoint")
        return cls(**{**data, "outputs": tuple(outputs)})


def budget_stop_line(finished: int, given: int, seconds: float) -> str:
    """What a scoring job that stopped at its work budget says, in the worker's progress and the
    run's metadata."""
    return (f"stopped after {finished} of {given} traces: the chunk's {seconds:g} s budget; "
            "the rest stay queued")


def job_directory(scratch: str | Path, *names: str) -> Path:
    """The one layout of the scratch (``RM_ARTIFACT_DIR``): ``<scratch>/<name>/...``, e.g. a
    personal model's attempt ``<model id>/attempt-<n>``, a candidate's ``shared-evaluator/
    <candidate>/train``, a scoring run's ``scoring/<evaluator>/<run>``. Each name is one path
    segment, so no id reaches outside the scratch."""
    for name in names:
        if not name or name in (".", "..") or "/" in name or "\\" in name:
            raise ValueError(f"job directory name {name!r}: expected one path segment")
    return Path(scratch).joinpath(*names)


def new_attempt_id() -> str:
    return uuid.uuid4().hex[:12]


def write_job(job_dir: Path, settings: JobSettings, *, train_pairs: Iterable[Pair] = (),
              eval_pairs: Iterable[Pair] = (), score_traces: Iterable[Trace] = (),
              benchmark_pairs: Iterable[Pair] = ()) -> JobSettings:
    """Write a job's inputs (JSON Lines; the worker makes them datasets). Needs no ML libraries.

    A directory used before is cleared of that attempt's outputs, datasets and downloaded
    checkpoint first, and its log moves to ``attempt-logs/``: callers never clear a job directory
    themselves (``attempt-logs/`` keeps every earlier attempt's log). Returns the settings as
    written: with a new attempt id when ``settings.attempt`` is None (``read_metrics`` checks
    metrics.json against it).
    """
    job_dir.mkdir(parents=True, exist_ok=True)
    clear_outputs(job_dir)
    retire_log(job_dir)
    for name in INPUT_DATASETS:  # the worker makes them again from the new JSON Lines
        _remove(job_dir / name)
    _remove(job_dir / CHECKPOINT_INPUT)  # the caller downloads the new job's checkpoint
    if settings.attempt is None:
        settings = replace(settings, attempt=new_attempt_id())
    rows = {
        TRAIN_PAIRS: (json.dumps(p.to_dict()) for p in train_pairs),
        EVAL_PAIRS: (json.dumps(p.to_dict()) for p in eval_pairs),
        SCORE_TRACES: (json.dumps(trace_to_dict(t)) for t in score_traces),
        BENCHMARK_PAIRS: (json.dumps(p.to_dict()) for p in benchmark_pairs),
    }
    try:
        for name, lines in rows.items():
            with atomic_path(job_dir / f"{name}.jsonl") as partial, partial.open("w") as out:
                for line in lines:
                    out.write(line + "\n")
        write_settings(job_dir, settings)  # last: a job without it is no job
    except OSError as error:
        if not disk_full(error):
            raise
        for name in rows:  # nothing of this job's inputs stays behind
            _remove(job_dir / f"{name}.jsonl")
        raise StorageFullError(
            f"the disk of the job directories is full ({error.strerror}): the job's inputs "
            "could not be written and none were kept; free space under RM_ARTIFACT_DIR "
            "(default $STASH_HOME/jobs), then retry") from None
    return settings


def write_settings(job_dir: Path, settings: JobSettings) -> None:
    with atomic_path(job_dir / SETTINGS) as partial:
        partial.write_text(json.dumps(settings.to_dict(), indent=2))


def read_settings(job_dir: Path) -> JobSettings:
    path = job_dir / SETTINGS
    if not path.is_file():
        raise InputError("missing: every job needs its settings", file=str(path))
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise InputError(f"not JSON: {error}", file=SETTINGS) from error
    return JobSettings.from_dict(data)


def attempt_of(job_dir: Path) -> str:
    """The attempt id settings.json names, or a new one (settings are validated later)."""
    try:
        attempt = json.loads((job_dir / SETTINGS).read_text()).get("attempt")
    except (OSError, ValueError, AttributeError):
        attempt = None
    return attempt if isinstance(attempt, str) and attempt else new_attempt_id()


def read_metrics(job_dir: Path) -> dict[str, Any]:
    """metrics.json of the attempt settings.json names: the job's success mark.

    Raises InputError when it is missing or belongs to another attempt.
    """
    path = job_dir / METRICS
    if not path.is_file():
        raise InputError("missing: the job did not succeed", file=str(path))
    metrics = json.loads(path.read_text())
    expected = read_settings(job_dir).attempt
    if expected is not None and metrics.get("attempt") != expected:
        raise InputError(f"written by attempt {metrics.get('attempt')!r}, "
                         f"not this job's {expected!r}", file=str(path), field="attempt")
    return metrics


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return ([json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            if path.is_file() else [])


# --- clean attempts and atomic writes ----------------------------------------------------------

def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def remove_job(job_dir: Path) -> None:
    """Delete a finished job's directory, logs and all: scratch nobody reads again (a scoring
    run's). A job about to run is never removed first: ``write_job`` clears what it must."""
    _remove(job_dir)


def keep_only_logs(job_dir: Path) -> None:
    """A finished attempt's directory keeps ``worker.log`` and ``attempt-logs/`` (docs/worker.md)
    and nothing else: no weights, pairs or scores stay on disk for anything to read later (what a
    later step needs was handed over to the object store, ``compute.upload.hand_over_results``)."""
    if not job_dir.is_dir():
        return
    kept = {LOG, ATTEMPT_LOGS}
    for entry in job_dir.iterdir():
        if entry.name in kept:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def clear_outputs(job_dir: Path) -> None:
    """Remove an earlier attempt's outputs and every half-written temporary."""
    for name in OUTPUTS:
        _remove(job_dir / name)
    for partial in job_dir.glob(f"*{PARTIAL}*"):
        _remove(partial)


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write (a file or a directory), renamed onto ``path``
    when the block ends without error: a kill leaves either the old state or the new one."""
    partial = path.with_name(f"{path.name}{PARTIAL}-{os.getpid()}")
    _remove(partial)
    try:
        yield partial
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)  # a directory cannot be replaced by os.replace
        os.replace(partial, path)
    finally:
        _remove(partial)


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


# A job handed to the resident worker (``worker.resident``, ``compute.resident``): one JSON object
# a line over its Unix socket; the step sends {"job_dir", "env"}, the worker answers {"pid"} once
# it takes the job and {"exit"} at its end.
MAX_RESIDENT_MESSAGE = 1 << 20


def resident_message(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


class ClosedBeforeMessage(ValueError):
    """The connection closed before any byte of a message: a probe that only connects
    (``compute.resident.resident_worker_while``), or a step gone before it asked."""


def read_resident_message(stream: Any) -> dict[str, Any]:
    """One message from ``stream`` (a socket's ``makefile("rb")``); ValueError for anything else,
    a connection closed before a whole line included (ClosedBeforeMessage before any byte)."""
    line = stream.readline(MAX_RESIDENT_MESSAGE)
    if not line:
        raise ClosedBeforeMessage("the connection closed before a message")
    if not line.endswith(b"\n"):
        raise ValueError("the connection closed before a whole message")
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError("a message is a JSON object")
    return message
