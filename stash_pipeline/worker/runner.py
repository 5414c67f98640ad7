"""Running one job directory: train and/or score, write the outputs, log to worker.log.

``python -m stash_pipeline.worker JOB_DIR`` calls ``main``; a Modal function calls the same.
Every attempt starts clean (an earlier attempt's outputs removed, its log kept in attempt-logs/),
logs each phase with its duration, and on SIGTERM logs why it stops before it exits.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset, Features, Value, load_from_disk

from stash_pipeline.core.calibration import RewardStats, action_credit, calibrated_score, reward_stats
from stash_pipeline.core.curves import downsample
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.serialize import trace_from_dict
from stash_pipeline.core.traces import Trace
from stash_pipeline.core.split import NotEnoughPairsError
from stash_pipeline.core.training_settings import MIN_PAIRS
from stash_pipeline.core.validation import validate_trace
from stash_pipeline.compute import job as contract
from stash_pipeline.worker.checkpoint import archive, save_model, write_stats
from stash_pipeline.worker.checkpoint_loading import (
    ACTION_REWARD_STATS_FILE, REWARD_STATS_FILE, checkpoint_directory, read_stats, saved_audience,
)
from stash_pipeline.worker.batching import read_rows, rows_for
from stash_pipeline.worker.metrics import training_metrics
from stash_pipeline.worker.model_card import write_model_card
from stash_pipeline.worker.modeling import (
    cast_parameters, load_config, load_reward_model, load_tokenizer, pick_device, scoring_precision,
    scoring_precision_note,
    stored_dtype, tokenize,
)
from stash_pipeline.worker.progress import (
    PhaseProgress, Progress, default_progress, logger, under_dagster_pipes,
)
from stash_pipeline.worker.render import (
    Audience, render_side, template_kind, template_of,
)
from stash_pipeline.worker.scoring import score_traces_and_actions
from stash_pipeline.worker.train import EncodedPair, score_pairs, train

# Signals a supervisor sends to stop a worker: the worker logs the reason, then exits 1.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class WorkerStopped(BaseException):
    """Raised in the main thread by a stop signal, so the job ends through its failure path."""

    def __init__(self, signal_number: int):
        self.signal_number = signal_number
        super().__init__(f"stopped by signal {signal_number} ({signal.Signals(signal_number).name})")


class Phases:
    """Logs each phase's start and its duration, and knows which phase is running."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.current: str | None = None
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.current = name
        self.progress.info(contract.phase_started_line(name))
        started = time.perf_counter()
        yield
        seconds = time.perf_counter() - started
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.progress.info(contract.phase_done_line(name, seconds))
        self.current = None


def input_dataset(job_dir: Path, name: str, column: str) -> Dataset:
    """The saved dataset ``name``, made from ``name.jsonl`` first when the caller wrote JSON Lines.

    The dataset is written beside its final name and renamed into place, so a worker killed while
    writing it leaves no half-written dataset for the next attempt.
    """
    directory, lines = job_dir / name, job_dir / f"{name}.jsonl"
    if not directory.is_dir():
        rows = [line for line in lines.read_text().splitlines() if line.strip()] if lines.is_file() else []
        # Rows stay JSON strings: Arrow would unify tool-schema structs and add null keys (ML notes).
        dataset = Dataset.from_dict({column: rows}, features=Features({column: Value("string")}))
        if not rows:
            return dataset  # datasets cannot load back a saved dataset of no rows (no shards)
        with contract.atomic_path(directory) as partial:
            dataset.save_to_disk(str(partial))
    try:
        dataset = load_from_disk(str(directory))
    except (OSError, ValueError) as error:
        raise InputError(f"not a saved dataset: {error}", file=name) from error
    if column not in dataset.column_names:
        raise InputError(f"expected a string column {column!r}", file=name, field=column)
    return dataset


def parse_pair(text: str, name: str, index: int) -> Pair:
    try:
        pair = Pair.from_dict(json.loads(text))
    except json.JSONDecodeError as error:
        raise InputError(f"not JSON: {error}", file=name, record=str(index), field="pair") from error
    except KeyError as error:
        raise InputError("missing", file=name, record=str(index), field=str(error.args[0])) from error
    for side in ("chosen", "rejected"):
        try:
            validate_trace(getattr(pair, side).trace)
        except InputError as error:
            raise InputError(error.reason, file=name, record=str(index),
                             field=f"{side}.{error.field}" if error.field else side) from error
    return pair


def encoded_pairs(job_dir: Path, name: str, tokenizer: Any, audience: Audience) -> tuple[list[Pair], list[EncodedPair]]:
    """The pairs of one input, rendered and tokenised by ``Dataset.map`` (the same left truncation as scoring)."""
    def encode(batch: dict[str, list], indices: list[int]) -> dict[str, list]:
        pairs = [parse_pair(text, name, i) for text, i in zip(batch[contract.PAIR_COLUMN], indices)]
        return {
            "chosen_ids": tokenize(tokenizer, [render_side(tokenizer, p.chosen, audience) for p in pairs]),
            "rejected_ids": tokenize(tokenizer, [render_side(tokenizer, p.rejected, audience) for p in pairs]),
        }

    dataset = input_dataset(job_dir, name, contract.PAIR_COLUMN)
    if len(dataset) == 0:
        return [], []
    dataset = dataset.map(encode, batched=True, with_indices=True, load_from_cache_file=False,
                          keep_in_memory=True, desc=f"tokenising {name}")
    pairs = [Pair.from_dict(json.loads(text)) for text in dataset[contract.PAIR_COLUMN]]
    return pairs, [EncodedPair(c, r) for c, r in zip(dataset["chosen_ids"], dataset["rejected_ids"])]


def traces_to_score(job_dir: Path) -> list[Trace]:
    traces = []
    dataset = input_dataset(job_dir, contract.SCORE_TRACES, contract.TRACE_COLUMN)
    for index, text in enumerate(dataset[contract.TRACE_COLUMN]):
        try:
            trace = trace_from_dict(json.loads(text))
            validate_trace(trace)
        except (json.JSONDecodeError, KeyError) as error:
            raise InputError(f"not a trace: {error!r}", file=contract.SCORE_TRACES, record=str(index),
                             field=contract.TRACE_COLUMN) from error
        except InputError as error:
            raise error.located(file=contract.SCORE_TRACES, record=str(index)) from error
        traces.append(trace)
    return traces


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with contract.atomic_path(path) as partial:
        partial.write_text("".join(json.dumps(row) + "\n" for row in rows))


def write_scores(job_dir: Path, settings: contract.JobSettings, model: Any, tokenizer: Any,
                 audience: Audience, traces: list[Trace], stats: RewardStats,
                 action_stats: RewardStats | None, progress: Progress, *,
                 actions_need_stats: bool = True,
                 known: dict[tuple[int, ...], float] | None = None) -> dict[str, int]:
    """scores.jsonl (raw and calibrated), action_scores.jsonl and pair_rewards.jsonl, as the
    settings ask. ``known``: rewards of token sequences already read under these weights (a
    whole trace among them is not forwarded again).

    Action scores need the model's action stats (trained on action comparisons): a scoring-only job
    that asks for them fails without; a training job skips them with a log line. ``known``: the
    rewards of token sequences already forwarded under these weights (``sequence_rewards``); a
    trace or benchmark side rendered to one of them is not forwarded again.
    """
    counts = {"scored_traces": 0, "scored_actions": 0}
    whole = "scores" in settings.outputs
    actions = "action_scores" in settings.outputs
    if actions and action_stats is None and not actions_need_stats:
        progress.info("no action comparisons in training: no action scores")
        actions = False
    elif actions and action_stats is None:
        raise InputError("this model was not trained on action comparisons and cannot score actions; "
                         "train it again with action comparisons", file=ACTION_REWARD_STATS_FILE)
    if whole or actions:
        # Whole traces and actions in the same forwards; progress at least every few seconds.
        reporter = PhaseProgress(progress.info, "scoring", {"traces": 0, "actions": 0}, work=1)
        rewards, raw = score_traces_and_actions(model, tokenizer, traces, audience, whole=whole,
                                                actions=actions, known=known, progress=reporter)
        reporter.emit()
    if whole:
        write_jsonl(job_dir / contract.SCORES, [
            {"trace_id": t.id, "trace_version": t.version, "evaluator": settings.evaluator,
             "score": rewards[t.id], "calibrated": calibrated_score(rewards[t.id], stats)}
            for t in traces])
        counts["scored_traces"] = len(traces)
        progress.info(f"scored {len(traces)} traces")
    if actions:
        assert action_stats is not None
        rows = [{"trace_id": t.id, "trace_version": t.version, "action_id": a.id,
                 "evaluator": settings.evaluator, "raw_reward": raw[a.id],
                 "credit": action_credit(raw[a.id], action_stats)}
                for t in traces for a in t.actions()]
        write_jsonl(job_dir / contract.ACTION_SCORES, rows)
        counts["scored_actions"] = len(rows)
        progress.info(f"scored {len(rows)} actions")
    if "pair_rewards" in settings.outputs:
        counts["scored_pairs"] = write_pair_rewards(job_dir, model, tokenizer, audience, progress,
                                                    known)
    return counts


def write_pair_rewards(job_dir: Path, model: Any, tokenizer: Any, audience: Audience,
                       progress: Progress, known: dict[tuple[int, ...], float] | None = None
                       ) -> int:
    """pair_rewards.jsonl: r(chosen) and r(rejected) of every benchmark pair, each side rendered
    and truncated exactly as a training pair's (the held-out accuracy's own scorer)."""
    pairs, encoded = encoded_pairs(job_dir, contract.BENCHMARK_PAIRS, tokenizer, audience)
    if known is not None:
        rewards = pair_rewards_from(model, encoded, tokenizer.pad_token_id, known)
    else:
        device = str(next(model.parameters()).device)
        rewards = score_pairs(model, encoded, device, pad_id=tokenizer.pad_token_id)
    write_jsonl(job_dir / contract.PAIR_REWARDS, [
        {"pair_id": pair.id, "chosen": chosen, "rejected": rejected}
        for pair, (chosen, rejected) in zip(pairs, rewards)])
    progress.info(f"scored {len(pairs)} benchmark pairs")
    return len(pairs)


def sequence_rewards(model: Any, sequences: Iterable[Sequence[int]], pad_id: int,
                     known: dict[tuple[int, ...], float] | None = None,
                     on_batch: Callable[[Sequence[Any], int], None] | None = None,
                     ) -> dict[tuple[int, ...], float]:
    """The reward of every distinct token sequence, read at its last token, under the model's
    current weights, added to ``known`` (returned). A sequence in ``known`` is not forwarded again,
    nor is a repeated one; for a decoder read by its score head, a sequence that begins a longer
    one is read inside it, and sequences that share a prompt run as one tree row
    (``batching.rows_for``).
    ``on_batch`` as ``read_rows``'s (progress reports)."""
    known = {} if known is None else known
    rows = rows_for(model, {tuple(s) for s in sequences} - known.keys())
    known.update(read_rows(model, rows, pad_id=pad_id, on_batch=on_batch))
    return known


def pair_rewards_from(model: Any, pairs: Sequence[EncodedPair], pad_id: int,
                      known: dict[tuple[int, ...], float],
                      progress: PhaseProgress | None = None) -> list[tuple[float, float]]:
    """(r(chosen), r(rejected)) per pair through ``sequence_rewards``: each distinct side once.
    ``progress`` counts the pairs whose sides are all read, as forwards finish."""
    on_batch = None
    if progress is not None:
        waiting = {}
        for pair in pairs:
            for side in {tuple(pair.chosen_ids), tuple(pair.rejected_ids)} - known.keys():
                waiting.setdefault(side, []).append(pair)
        unread = {id(pair): len({tuple(pair.chosen_ids), tuple(pair.rejected_ids)} - known.keys())
                  for pair in pairs}
        progress.add(pairs=sum(1 for pair in pairs if not unread[id(pair)]))

        def on_batch(keys: Sequence[Any], tokens: int) -> None:
            done = 0
            for key in keys:
                for pair in waiting.pop(key, ()):
                    unread[id(pair)] -= 1
                    done += unread[id(pair)] == 0
            progress.add(tokens, pairs=done)

    sequence_rewards(model, (s for p in pairs for s in (p.chosen_ids, p.rejected_ids)), pad_id,
                     known, on_batch)
    return [(known[tuple(p.chosen_ids)], known[tuple(p.rejected_ids)]) for p in pairs]


def record_window(job_dir: Path, settings: contract.JobSettings, tokenizer: Any) -> int:
    """The window the tokenizer keeps, recorded in settings.json; a warning naming the base model
    when its positions end before the window asked for (BERT: 512 of 1024)."""
    window = int(tokenizer.model_max_length)
    if window < settings.max_length:
        logger.warning(f"base model {settings.base_model} has {window} positions: inputs keep "
                       f"their last {window} tokens, not {settings.max_length}")
    if window != settings.max_length:
        contract.write_settings(job_dir, replace(settings, max_length=window))
    return window


def train_job(job_dir: Path, settings: contract.JobSettings, progress: Progress, phase: Phases
              ) -> dict[str, Any]:
    device = pick_device()
    audience: Audience = settings.audience or "personal"
    base = settings.base_model
    assert base is not None
    with phase("inputs"):
        config = load_config(base)
        tokenizer = load_tokenizer(base, max_length=settings.max_length, config=config)
        train_pairs, train_encoded = encoded_pairs(job_dir, contract.TRAIN_PAIRS, tokenizer, audience)
        eval_pairs, eval_encoded = encoded_pairs(job_dir, contract.EVAL_PAIRS, tokenizer, audience)
        traces = traces_to_score(job_dir) if {"scores", "action_scores"} & set(settings.outputs) else []
        window = record_window(job_dir, settings, tokenizer)
        progress.info(f"{len(train_pairs)} training pairs, {len(eval_pairs)} held out, "
                      f"{len(traces)} traces to score, device {device}, window {window}, "
                      f"chat template {template_kind(template_of(tokenizer))}")
        # Checked before the model is loaded, as the seed asks (a real base model is a large download).
        if len(train_pairs) + len(eval_pairs) < MIN_PAIRS:
            raise NotEnoughPairsError(len(train_pairs) + len(eval_pairs))
        if not train_pairs:
            raise InputError("a training job needs at least one training pair", file=contract.TRAIN_PAIRS)
    with phase("load"):
        torch.manual_seed(settings.seed)  # the new score head's initialisation
        model = load_reward_model(base, device=device, tokenizer=tokenizer)
    pad_id = tokenizer.pad_token_id
    with phase("training"):
        result = train(model, train_encoded, epochs=settings.epochs, device=device, pad_id=pad_id,
                       seed=settings.seed, progress=progress)
    # From here on the model is what the checkpoint stores (the base model's dtype unless asked
    # otherwise), held in fp32 (exact) and scored in the settings' precision: every number the job
    # reports comes from those weights, so a scoring-only job with this checkpoint gives the same.
    stored = (stored_dtype(config) if settings.checkpoint_dtype == "auto"
              else getattr(torch, settings.checkpoint_dtype))
    cast_parameters(model, stored)
    precision = scoring_precision(settings.score_dtype, device)
    progress.info(scoring_precision_note(settings.score_dtype, device))
    with ExitStack() as checkpoint:
        if "checkpoint" in settings.outputs:
            # The folder is renamed into place whole once the stats are in it too.
            directory = checkpoint.enter_context(contract.atomic_path(job_dir / contract.CHECKPOINT_DIR))
            with phase("save"):
                save_model(model, tokenizer, directory)
                progress.info(f"checkpoint weights stored in {str(stored).removeprefix('torch.')}")
        cast_parameters(model, torch.float32)
        # Every sequence forwarded under the final weights, by its tokens: forwarded once only.
        known: dict[tuple[int, ...], float] = {}
        with phase("evaluation"), precision:
            evaluated = PhaseProgress(progress.info, "evaluation",
                                      {"pairs": len(eval_encoded) + len(train_encoded)},
                                      work=sum(p.cost for p in (*eval_encoded, *train_encoded)))
            eval_rewards = pair_rewards_from(model, eval_encoded, pad_id, known, evaluated)
            # Display scale from training pairs only (the seed): both sides of every training pair.
            train_rewards = pair_rewards_from(model, train_encoded, pad_id, known, evaluated)
            evaluated.emit()
            stats = reward_stats(r for pair in train_rewards for r in pair)
            action_rewards = [r for p, pair in zip(train_pairs, train_rewards) if p.kind == "action"
                              for r in pair]
            action_stats = reward_stats(action_rewards) if action_rewards else None
        metrics = training_metrics(
            train_pairs=train_pairs, eval_pairs=eval_pairs, eval_rewards=eval_rewards,
            excluded_cross_trace_pairs=settings.excluded_cross_trace_pairs,
            final_loss=result.final_loss, epochs=result.epochs, device=device, seconds=0.0,
            max_length=window, chat_template=template_kind(template_of(tokenizer)))
        if "checkpoint" in settings.outputs:
            write_stats(directory, audience=audience, reward_stats=stats, action_reward_stats=action_stats)
            write_model_card(directory, evaluator=settings.evaluator, audience=audience,
                             base_model=base, window=tokenizer.model_max_length,
                             stored_dtype=str(stored).removeprefix("torch."), metrics=metrics,
                             reward_stats=stats, action_reward_stats=action_stats)
    if "checkpoint" in settings.outputs:
        with phase("archive"):
            archive(job_dir / contract.CHECKPOINT_DIR, job_dir / contract.ARCHIVE_NAME)
    (job_dir / contract.LOSSES).write_text(json.dumps(result.step_losses))
    with phase("scoring"), scoring_precision(settings.score_dtype, device):
        # A model trained without action comparisons has no action credit: it scores whole traces only.
        write_scores(job_dir, settings, model, tokenizer, audience, traces, stats, action_stats, progress,
                     actions_need_stats=False, known=known)
    # The loss curve the viewer draws: losses.json stays in scratch, the metrics are stored.
    return {**metrics, "loss_curve": downsample(result.step_losses)}


def score_job(job_dir: Path, settings: contract.JobSettings, progress: Progress, phase: Phases
              ) -> dict[str, Any]:
    """Score with an existing checkpoint, as it was trained: its template, truncation, audience."""
    device = pick_device()
    assert settings.checkpoint is not None
    # A relative checkpoint path is the job directory's (the caller downloads it there).
    with phase("load"), checkpoint_directory(job_dir / settings.checkpoint) as directory:
        audience = saved_audience(directory)
        if settings.audience is not None and settings.audience != audience:
            raise InputError(f"checkpoint {settings.checkpoint} was trained for the {audience} audience; "
                             "a scoring job scores with the audience it was trained for",
                             file=contract.SETTINGS, field="audience")
        config = load_config(str(directory))
        tokenizer = load_tokenizer(str(directory), max_length=settings.max_length, config=config)
        model = load_reward_model(str(directory), device=device, tokenizer=tokenizer)
        stats = read_stats(directory / REWARD_STATS_FILE, required=True)
        action_stats = read_stats(directory / ACTION_REWARD_STATS_FILE, required=False)
    assert stats is not None
    with phase("inputs"):
        traces = traces_to_score(job_dir)
    progress.info(scoring_precision_note(settings.score_dtype, device))
    with phase("scoring"), scoring_precision(settings.score_dtype, device):
        counts = write_scores(job_dir, settings, model, tokenizer, audience, traces, stats, action_stats,
                              progress)
    return {**counts, "audience": audience, "device": device,
            "max_length": tokenizer.model_max_length}


def run_job(job_dir: Path, progress: Progress | None = None, phase: Phases | None = None,
            attempt: str | None = None) -> dict[str, Any]:
    """Run the job in ``job_dir`` and write its outputs; metrics.json last, as the success mark."""
    started = time.perf_counter()
    progress = progress or default_progress()
    phase = phase or Phases(progress)
    contract.clear_outputs(job_dir)  # an earlier attempt's success must not look like this one's
    settings = contract.read_settings(job_dir)
    attempt = settings.attempt or attempt or contract.new_attempt_id()
    run = train_job if settings.is_training else score_job
    metrics = run(job_dir, settings, progress, phase)
    metrics.update(seconds=time.perf_counter() - started, attempt=attempt, phases=dict(phase.seconds))
    with contract.atomic_path(job_dir / contract.METRICS) as partial:
        partial.write_text(json.dumps(metrics, indent=2))
    progress.info(f"metrics: {json.dumps(metrics)}")
    return metrics


def _attempt_of(job_dir: Path) -> str:
    """The attempt id settings.json names, or a new one (settings are validated later)."""
    try:
        attempt = json.loads((job_dir / contract.SETTINGS).read_text()).get("attempt")
    except (OSError, ValueError, AttributeError):
        attempt = None
    return attempt if isinstance(attempt, str) and attempt else contract.new_attempt_id()


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """While the job runs, SIGTERM and SIGINT raise ``WorkerStopped`` in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread (e.g. a test's worker thread)
        return

    def stop(signal_number: int, _frame: Any) -> None:
        raise WorkerStopped(signal_number)

    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def main(job_dir: str) -> int:
    """Run a job with logging to worker.log; on failure the log ends with the reason, exit status 1."""
    path = Path(job_dir)
    if not path.is_dir():
        print(f"job directory {job_dir} does not exist", file=sys.stderr)
        return 2
    contract.retire_log(path)
    attempt = _attempt_of(path)
    handler = logging.FileHandler(path / contract.LOG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.info(f"attempt {attempt} started (pid {os.getpid()}, torch {torch.__version__})")
    with ExitStack() as stack:
        pipes = None
        progress: Progress | None = None
        phase: Phases | None = None
        try:
            stack.enter_context(stop_signals_raise())
            if under_dagster_pipes():
                from dagster_pipes import open_dagster_pipes

                pipes = stack.enter_context(open_dagster_pipes(
                    message_writer=contract.pipes_message_writer()))
            progress = default_progress(pipes)
            phase = Phases(progress)
            metrics = run_job(path, progress, phase, attempt)
            if pipes is not None:
                pipes.report_custom_message({"metrics": metrics})
            return 0
        except BaseException as error:  # noqa: BLE001 - any failure must end the log with its reason
            where = f" in phase {phase.current}" if phase is not None and phase.current else ""
            # The last line names what failed (the phase, the file or model path) and why: the
            # seed's `error` is the log's tail.
            logger.error("job failed%s\n%s\njob failed%s: %s: %s", where, traceback.format_exc().rstrip(),
                         where, type(error).__name__, error)
            if pipes is not None:
                pipes.log.error(f"job failed{where}: {type(error).__name__}: {error}")
            return 1
        finally:
            if progress is not None:
                progress.close()
            handler.close()
            root.removeHandler(handler)
