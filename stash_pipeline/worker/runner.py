"""Running one job directory: train and/or score, write the outputs, log to worker.log.

``python -m stash_pipeline.worker JOB_DIR`` calls ``main``; a Modal function calls the same.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset, Features, Value, load_from_disk

from stash_pipeline.core.calibration import action_credit, calibrated_score, reward_stats
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.serialize import trace_from_dict
from stash_pipeline.core.traces import Trace
from stash_pipeline.core.split import NotEnoughPairsError
from stash_pipeline.core.training_settings import MIN_PAIRS
from stash_pipeline.core.validation import validate_trace
from stash_pipeline.compute import job as contract
from stash_pipeline.worker.checkpoint import ARCHIVE_NAME, CHECKPOINT_DIR, archive, save_checkpoint
from stash_pipeline.worker.checkpoint_loading import (
    ACTION_REWARD_STATS_FILE, REWARD_STATS_FILE, checkpoint_directory, read_stats,
)
from stash_pipeline.worker.metrics import training_metrics
from stash_pipeline.worker.modeling import load_reward_model, load_tokenizer, pick_device, tokenize
from stash_pipeline.worker.progress import Progress, default_progress, logger, under_dagster_pipes
from stash_pipeline.worker.render import Audience, render_side, render_trace
from stash_pipeline.worker.scoring import score_texts, score_trace_actions
from stash_pipeline.worker.train import EncodedPair, score_pairs, train


def input_dataset(job_dir: Path, name: str, column: str) -> Dataset:
    """The saved dataset ``name``, made from ``name.jsonl`` first when the caller wrote JSON Lines."""
    directory, lines = job_dir / name, job_dir / f"{name}.jsonl"
    if not directory.is_dir():
        rows = [line for line in lines.read_text().splitlines() if line.strip()] if lines.is_file() else []
        # Rows stay JSON strings: Arrow would unify tool-schema structs and add null keys (ML notes).
        dataset = Dataset.from_dict({column: rows}, features=Features({column: Value("string")}))
        if not rows:
            return dataset  # datasets cannot load back a saved dataset of no rows (no shards)
        dataset.save_to_disk(str(directory))
    dataset = load_from_disk(str(directory))
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
                          desc=f"tokenising {name}")
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
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def write_scores(job_dir: Path, settings: contract.JobSettings, model: Any, tokenizer: Any,
                 audience: Audience, stats: Any, action_stats: Any, progress: Progress, *,
                 actions_need_stats: bool = True) -> dict[str, int]:
    """scores.jsonl (raw and calibrated), action_scores.jsonl and pair_rewards.jsonl, as the
    settings ask.

    Action scores need the model's action stats (trained on action comparisons): a scoring-only job
    that asks for them fails without; a training job skips them with a log line.
    """
    traces = traces_to_score(job_dir)
    counts = {"scored_traces": 0, "scored_actions": 0}
    if "scores" in settings.outputs:
        rewards = score_texts(model, tokenizer, [render_trace(tokenizer, t, audience) for t in traces])
        write_jsonl(job_dir / contract.SCORES, [
            {"trace_id": t.id, "trace_version": t.version, "evaluator": settings.evaluator, "score": r,
             "calibrated": calibrated_score(r, stats)}
            for t, r in zip(traces, rewards)])
        counts["scored_traces"] = len(traces)
        progress.info(f"scored {len(traces)} traces")
    if "action_scores" in settings.outputs and action_stats is None and not actions_need_stats:
        progress.info("no action comparisons in training: no action scores")
    elif "action_scores" in settings.outputs:
        if action_stats is None:
            raise InputError("this model was not trained on action comparisons and cannot score actions; "
                             "train it again with action comparisons", file=ACTION_REWARD_STATS_FILE)
        raw = score_trace_actions(model, tokenizer, traces, audience)
        rows = [{"trace_id": t.id, "trace_version": t.version, "action_id": a.id,
                 "evaluator": settings.evaluator, "raw_reward": raw[a.id],
                 "credit": action_credit(raw[a.id], action_stats)}
                for t in traces for a in t.actions()]
        write_jsonl(job_dir / contract.ACTION_SCORES, rows)
        counts["scored_actions"] = len(rows)
        progress.info(f"scored {len(rows)} actions")
    if "pair_rewards" in settings.outputs:
        counts["scored_pairs"] = write_pair_rewards(job_dir, model, tokenizer, audience, progress)
    return counts


def write_pair_rewards(job_dir: Path, model: Any, tokenizer: Any, audience: Audience,
                       progress: Progress) -> int:
    """pair_rewards.jsonl: r(chosen) and r(rejected) of every benchmark pair, each side rendered
    and truncated exactly as a training pair's (the held-out accuracy's own scorer)."""
    pairs, encoded = encoded_pairs(job_dir, contract.BENCHMARK_PAIRS, tokenizer, audience)
    device = str(next(model.parameters()).device)
    rewards = score_pairs(model, encoded, device, pad_id=tokenizer.pad_token_id)
    write_jsonl(job_dir / contract.PAIR_REWARDS, [
        {"pair_id": pair.id, "chosen": chosen, "rejected": rejected}
        for pair, (chosen, rejected) in zip(pairs, rewards)])
    progress.info(f"scored {len(pairs)} benchmark pairs")
    return len(pairs)


def train_job(job_dir: Path, settings: contract.JobSettings, progress: Progress, started: float) -> dict[str, Any]:
    device = pick_device()
    audience = settings.audience
    tokenizer = load_tokenizer(settings.base_model, max_length=settings.max_length)
    train_pairs, train_encoded = encoded_pairs(job_dir, contract.TRAIN_PAIRS, tokenizer, audience)
    eval_pairs, eval_encoded = encoded_pairs(job_dir, contract.EVAL_PAIRS, tokenizer, audience)
    progress.info(f"{len(train_pairs)} training pairs, {len(eval_pairs)} held out, device {device}")
    # Checked before the model is loaded, as the seed asks (a real base model is a large download).
    if len(train_pairs) + len(eval_pairs) < MIN_PAIRS:
        raise NotEnoughPairsError(len(train_pairs) + len(eval_pairs))
    if not train_pairs:
        raise InputError("a training job needs at least one training pair", file=contract.TRAIN_PAIRS)
    torch.manual_seed(settings.seed)  # the new score head's initialisation
    model = load_reward_model(settings.base_model, device=device, tokenizer=tokenizer)
    pad_id = tokenizer.pad_token_id
    result = train(model, train_encoded, epochs=settings.epochs, device=device, pad_id=pad_id,
                   seed=settings.seed, progress=progress)
    eval_rewards = score_pairs(model, eval_encoded, device, pad_id=pad_id)
    # Display scale from training pairs only (the seed): both sides of every training pair.
    train_rewards = score_pairs(model, train_encoded, device, pad_id=pad_id)
    stats = reward_stats(r for pair in train_rewards for r in pair)
    action_rewards = [r for p, pair in zip(train_pairs, train_rewards) if p.kind == "action" for r in pair]
    action_stats = reward_stats(action_rewards) if action_rewards else None
    if "checkpoint" in settings.outputs:
        directory = save_checkpoint(model, tokenizer, job_dir / CHECKPOINT_DIR, audience=audience,
                                    reward_stats=stats, action_reward_stats=action_stats)
        archive(directory, job_dir / ARCHIVE_NAME)
    # A model trained without action comparisons has no action credit: it scores whole traces only.
    (job_dir / contract.LOSSES).write_text(json.dumps(result.step_losses))
    write_scores(job_dir, settings, model, tokenizer, audience, stats, action_stats, progress,
                 actions_need_stats=False)
    return training_metrics(
        train_pairs=train_pairs, eval_pairs=eval_pairs, eval_rewards=eval_rewards,
        excluded_cross_trace_pairs=settings.excluded_cross_trace_pairs, final_loss=result.final_loss,
        epochs=result.epochs, device=device, seconds=time.perf_counter() - started)


def score_job(job_dir: Path, settings: contract.JobSettings, progress: Progress, started: float) -> dict[str, Any]:
    """Score with an existing checkpoint, as it was trained: its template, truncation, audience."""
    device = pick_device()
    # A relative checkpoint path is the job directory's (the caller downloads it there).
    with checkpoint_directory(job_dir / settings.checkpoint) as directory:
        tokenizer = load_tokenizer(str(directory), max_length=settings.max_length)
        model = load_reward_model(str(directory), device=device, tokenizer=tokenizer)
        stats = read_stats(directory / REWARD_STATS_FILE, required=True)
        action_stats = read_stats(directory / ACTION_REWARD_STATS_FILE, required=False)
    counts = write_scores(job_dir, settings, model, tokenizer, settings.audience, stats, action_stats,
                          progress)
    return {**counts, "device": device, "seconds": time.perf_counter() - started}


def run_job(job_dir: Path, progress: Progress | None = None) -> dict[str, Any]:
    """Run the job in ``job_dir`` and write its outputs; metrics.json last, as the success mark."""
    started = time.perf_counter()
    progress = progress or default_progress()
    settings = contract.read_settings(job_dir)
    run = train_job if settings.is_training else score_job
    metrics = run(job_dir, settings, progress, started)
    temporary = job_dir / (contract.METRICS + ".tmp")
    temporary.write_text(json.dumps(metrics, indent=2))
    os.replace(temporary, job_dir / contract.METRICS)
    progress.info(f"metrics: {json.dumps(metrics)}")
    return metrics


def main(job_dir: str) -> int:
    """Run a job with logging to worker.log; on failure the log ends with the reason, exit status 1."""
    path = Path(job_dir)
    if not path.is_dir():
        print(f"job directory {job_dir} does not exist", file=sys.stderr)
        return 2
    handler = logging.FileHandler(path / contract.LOG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    logger.setLevel(logging.INFO)
    with ExitStack() as stack:
        pipes = None
        if under_dagster_pipes():
            from dagster_pipes import open_dagster_pipes

            pipes = stack.enter_context(open_dagster_pipes(
                message_writer=contract.pipes_message_writer()))
        progress = default_progress(pipes)
        try:
            metrics = run_job(path, progress)
            if pipes is not None:
                pipes.report_custom_message({"metrics": metrics})
            return 0
        except BaseException as error:  # noqa: BLE001 - any failure must end the log with its reason
            # The traceback's last line (the exception) is the log's last line: the seed's `error`.
            logger.error("job failed\n%s", traceback.format_exc().rstrip())
            if pipes is not None:
                pipes.log.error(f"{type(error).__name__}: {error}")
            return 1
        finally:
            progress.close()
            handler.close()
            root.removeHandler(handler)
