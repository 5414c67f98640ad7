"""Running one job directory: train and/or score, write the outputs, log to worker.log.

``python -m stash_pipeline.worker JOB_DIR`` calls ``main``; a Modal function calls the same.
Every attempt starts clean (an earlier attempt's outputs removed, its log kept in attempt-logs/),
logs each phase with its duration, and on SIGTERM logs why it stops before it exits. This module
only conducts: the inputs are read by ``job_inputs``, the outputs written by ``job_outputs`` and
``checkpoint``, the stop signals handled by ``stop_signals``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import torch

from stash_pipeline.compute import job as contract
from stash_pipeline.core.calibration import RewardStats, display_scale_sample, reward_stats
from stash_pipeline.core.curves import downsample
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.split import NotEnoughPairsError
from stash_pipeline.core.traces import Trace
from stash_pipeline.core.training_settings import MIN_PAIRS
from stash_pipeline.worker.checkpoint import (
    ACTION_REWARD_STATS_FILE,
    archive,
    open_checkpoint,
    writing_checkpoint,
)
from stash_pipeline.worker.evaluation import pair_rewards_from
from stash_pipeline.worker.job_inputs import (
    attempt_of,
    encoded_pairs,
    record_window,
    traces_to_score,
)
from stash_pipeline.worker.job_outputs import (
    write_action_scores,
    write_losses,
    write_metrics,
    write_pair_rewards,
    write_trace_scores,
)
from stash_pipeline.worker.metrics import training_metrics
from stash_pipeline.worker.modeling import (
    cast_parameters,
    load_config,
    load_reward_model,
    load_tokenizer,
    pick_device,
    scoring_precision,
    scoring_precision_note,
    stored_dtype,
)
from stash_pipeline.worker.progress import (
    PhaseProgress,
    Progress,
    default_progress,
    logger,
    under_dagster_pipes,
)
from stash_pipeline.worker.render import Audience, template_kind, template_of
from stash_pipeline.worker.scoring import score_traces_and_actions
from stash_pipeline.worker.stop_signals import stop_signals_raise
from stash_pipeline.worker.train import train


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


def write_scores(job_dir: Path, settings: contract.JobSettings, model: Any, tokenizer: Any,
                 audience: Audience, traces: list[Trace], stats: RewardStats,
                 action_stats: RewardStats | None, progress: Progress, *,
                 actions_need_stats: bool = True,
                 known: dict[tuple[int, ...], float] | None = None) -> dict[str, int]:
    """scores.jsonl (raw and calibrated), action_scores.jsonl and pair_rewards.jsonl, as the
    settings ask; the row counts.

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
        raise InputError("this model was not trained on action comparisons and cannot score "
                         "actions; train it again with action comparisons",
                         file=ACTION_REWARD_STATS_FILE)
    if whole or actions:
        # Whole traces and actions in the same forwards; progress at least every few seconds.
        reporter = PhaseProgress(progress.info, "scoring", {"traces": 0, "actions": 0}, work=1)
        rewards, raw = score_traces_and_actions(model, tokenizer, traces, audience, whole=whole,
                                                actions=actions, known=known, progress=reporter)
        reporter.emit()
    if whole:
        counts["scored_traces"] = write_trace_scores(job_dir, settings.evaluator, traces, rewards,
                                                     stats)
        progress.info(f"scored {len(traces)} traces")
    if actions:
        assert action_stats is not None
        counts["scored_actions"] = write_action_scores(job_dir, settings.evaluator, traces, raw,
                                                       action_stats)
        progress.info(f"scored {counts['scored_actions']} actions")
    if "pair_rewards" in settings.outputs:
        pairs, encoded = encoded_pairs(job_dir, contract.BENCHMARK_PAIRS, tokenizer, audience)
        counts["scored_pairs"] = write_pair_rewards(
            job_dir, pairs, pair_rewards_from(model, encoded, tokenizer.pad_token_id, known))
        progress.info(f"scored {len(pairs)} benchmark pairs")
    return counts


def train_job(job_dir: Path, settings: contract.JobSettings, progress: Progress, phase: Phases
              ) -> dict[str, Any]:
    device = pick_device()
    audience: Audience = settings.audience or "personal"
    base = settings.base_model
    assert base is not None
    with phase("inputs"):
        config = load_config(base)
        tokenizer = load_tokenizer(base, max_length=settings.max_length, config=config)
        train_pairs, train_encoded = encoded_pairs(job_dir, contract.TRAIN_PAIRS, tokenizer,
                                                   audience)
        eval_pairs, eval_encoded = encoded_pairs(job_dir, contract.EVAL_PAIRS, tokenizer, audience)
        traces = (traces_to_score(job_dir) if {"scores", "action_scores"} & set(settings.outputs)
                  else [])
        window = record_window(job_dir, settings, tokenizer)
        progress.info(f"{len(train_pairs)} training pairs, {len(eval_pairs)} held out, "
                      f"{len(traces)} traces to score, device {device}, window {window}, "
                      f"chat template {template_kind(template_of(tokenizer))}")
        # Checked before the model is loaded, as the seed asks (a real base model is a large
        # download).
        if len(train_pairs) + len(eval_pairs) < MIN_PAIRS:
            raise NotEnoughPairsError(len(train_pairs) + len(eval_pairs))
        if not train_pairs:
            raise InputError("a training job needs at least one training pair",
                             file=contract.TRAIN_PAIRS)
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
            # The folder is renamed into place whole once the stats and the card are in it too.
            writer = checkpoint.enter_context(writing_checkpoint(job_dir / contract.CHECKPOINT_DIR))
            with phase("save"):
                writer.save_model(model, tokenizer)
                progress.info(f"checkpoint weights stored in {str(stored).removeprefix('torch.')}")
        cast_parameters(model, torch.float32)
        # Every sequence forwarded under the final weights, by its tokens: forwarded once only.
        known: dict[tuple[int, ...], float] = {}
        with phase("evaluation"), precision:
            # Display scale from training pairs only (the seed): both sides of each sampled pair.
            scale_pairs, action_scale_pairs = display_scale_sample([p.kind for p in train_pairs])
            scale_encoded = [train_encoded[i] for i in sorted({*scale_pairs, *action_scale_pairs})]
            evaluated = PhaseProgress(progress.info, "evaluation",
                                      {"pairs": len(eval_encoded) + len(scale_encoded)},
                                      work=sum(p.cost for p in (*eval_encoded, *scale_encoded)))
            eval_rewards = pair_rewards_from(model, eval_encoded, pad_id, known, evaluated)
            pair_rewards_from(model, scale_encoded, pad_id, known, evaluated)
            evaluated.emit()

            def side_rewards(indices: list[int]) -> list[float]:
                return [known[tuple(ids)] for i in indices
                        for ids in (train_encoded[i].chosen_ids, train_encoded[i].rejected_ids)]

            stats = reward_stats(side_rewards(scale_pairs))
            action_stats = (reward_stats(side_rewards(action_scale_pairs)) if action_scale_pairs
                            else None)
        metrics = training_metrics(
            train_pairs=train_pairs, eval_pairs=eval_pairs, eval_rewards=eval_rewards,
            excluded_cross_trace_pairs=settings.excluded_cross_trace_pairs,
            final_loss=result.final_loss, epochs=result.epochs, device=device, seconds=0.0,
            max_length=window, chat_template=template_kind(template_of(tokenizer)))
        if "checkpoint" in settings.outputs:
            writer.finish(evaluator=settings.evaluator, audience=audience, base_model=base,
                          metrics=metrics, reward_stats=stats, action_reward_stats=action_stats)
    if "checkpoint" in settings.outputs:
        with phase("archive"):
            archive(job_dir / contract.CHECKPOINT_DIR, job_dir / contract.ARCHIVE_NAME)
    write_losses(job_dir, result.step_losses)
    with phase("scoring"), scoring_precision(settings.score_dtype, device):
        # A model trained without action comparisons has no action credit: it scores whole traces
        # only.
        write_scores(job_dir, settings, model, tokenizer, audience, traces, stats, action_stats,
                     progress, actions_need_stats=False, known=known)
    # The loss curve the viewer draws: losses.json stays in scratch, the metrics are stored.
    return {**metrics, "loss_curve": downsample(result.step_losses)}


def score_job(job_dir: Path, settings: contract.JobSettings, progress: Progress, phase: Phases
              ) -> dict[str, Any]:
    """Score with an existing checkpoint, as it was trained: its template, truncation, audience."""
    device = pick_device()
    assert settings.checkpoint is not None
    # A relative checkpoint path is the job directory's (the caller downloads it there).
    with phase("load"), open_checkpoint(job_dir / settings.checkpoint) as saved:
        audience = saved.audience
        if settings.audience is not None and settings.audience != audience:
            raise InputError(f"checkpoint {settings.checkpoint} was trained for the {audience} "
                             "audience; a scoring job scores with the audience it was trained for",
                             file=contract.SETTINGS, field="audience")
        model, tokenizer = saved.load_model(device=device, max_length=settings.max_length)
    with phase("inputs"):
        traces = traces_to_score(job_dir)
    progress.info(scoring_precision_note(settings.score_dtype, device))
    with phase("scoring"), scoring_precision(settings.score_dtype, device):
        counts = write_scores(job_dir, settings, model, tokenizer, audience, traces,
                              saved.reward_stats, saved.action_reward_stats, progress)
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
    metrics.update(seconds=time.perf_counter() - started, attempt=attempt,
                   phases=dict(phase.seconds))
    write_metrics(job_dir, metrics)
    progress.info(f"metrics: {json.dumps(metrics)}")
    return metrics


def main(job_dir: str) -> int:
    """Run a job with logging to worker.log; on failure the log ends with the reason, exit status
    1."""
    path = Path(job_dir)
    if not path.is_dir():
        print(f"job directory {job_dir} does not exist", file=sys.stderr)
        return 2
    contract.retire_log(path)
    attempt = attempt_of(path)
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
            logger.error("job failed%s\n%s\njob failed%s: %s: %s", where,
                         traceback.format_exc().rstrip(), where, type(error).__name__, error)
            if pipes is not None:
                pipes.log.error(f"job failed{where}: {type(error).__name__}: {error}")
            return 1
        finally:
            if progress is not None:
                progress.close()
            handler.close()
            root.removeHandler(handler)
