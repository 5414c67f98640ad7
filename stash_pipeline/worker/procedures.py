"""The two jobs a job directory asks for: training (then evaluating and scoring with the new
weights) and scoring with a checkpoint, each conducted phase by phase.

``runner.py`` imports this module only once the settings were read, so a job whose settings are
invalid fails in a fraction of a second instead of after torch's and transformers' imports. Like
the runner, it only conducts: inputs are read by ``inputs``, outputs written by ``outputs``
and ``checkpoint``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from stash_pipeline.compute import contract
from stash_pipeline.compute.contract import budget_stop_line
from stash_pipeline.core.calibration import RewardStats, display_scale_sample, reward_stats
from stash_pipeline.core.curves import downsample
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.split import NotEnoughPairsError
from stash_pipeline.core.traces import Trace
from stash_pipeline.core.training_settings import MIN_PAIRS
from stash_pipeline.worker.checkpoint import (
    ACTION_REWARD_STATS_FILE,
    archive,
    open_checkpoint,
    writing_checkpoint,
)
from stash_pipeline.worker.evaluation import forward_tokens, pair_rewards_from
from stash_pipeline.worker.inputs import encoded_pairs, record_window, traces_to_score
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
from stash_pipeline.worker.outputs import (
    write_action_scores,
    write_finished,
    write_losses,
    write_pair_rewards,
    write_trace_scores,
)
from stash_pipeline.worker.progress import PhaseProgress, Progress
from stash_pipeline.worker.render import Audience, template_kind, template_of
from stash_pipeline.worker.scoring import WorkBudget, score_traces_and_actions, score_within_budget
from stash_pipeline.worker.train import EncodedPair, train

# What runner.Phases is: phase(name) times and logs the phase it wraps.
Phase = Callable[[str], AbstractContextManager[None]]


def write_scores(job_dir: Path, settings: contract.JobSettings, model: Any, tokenizer: Any,
                 audience: Audience, traces: list[Trace], stats: RewardStats,
                 action_stats: RewardStats | None, progress: Progress, *,
                 actions_need_stats: bool = True,
                 known: dict[tuple[int, ...], float] | None = None,
                 untrained: dict[str, float] | None = None,
                 budget: WorkBudget | None = None) -> dict[str, Any]:
    """scores.jsonl (raw and calibrated), action_scores.jsonl and pair_rewards.jsonl, as the
    settings ask; the row counts.

    With a work ``budget`` (a scoring job's ``work_seconds``) the traces are scored in groups
    until it is spent (``score_within_budget``): the outputs hold the finished traces only,
    whole (a score with all its actions' scores), and finished_traces.jsonl lists them.

    Action scores need the model's action stats (trained on action comparisons): a scoring-only job
    that asks for them fails without; a training job skips them with a log line. ``known``: the
    rewards of token sequences already forwarded under these weights (``sequence_rewards``); a
    trace or benchmark side rendered to one of them is not forwarded again. ``untrained``: the
    untrained base's rewards by trace id, written beside the model's (a training job's).
    """
    counts: dict[str, Any] = {"scored_traces": 0, "scored_actions": 0}
    lengths: dict[str, int] = {}  # by trace and action id: tokens before the window cut
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
        if budget is None:
            rewards, raw = score_traces_and_actions(model, tokenizer, traces, audience,
                                                    whole=whole, actions=actions, known=known,
                                                    progress=reporter, lengths=lengths)
        else:
            given = len(traces)
            scored = score_within_budget(model, tokenizer, traces, audience, budget, whole=whole,
                                         actions=actions, progress=reporter, lengths=lengths)
            traces, rewards, raw = scored.finished, scored.whole, scored.actions
            counts["unfinished_traces"] = given - len(traces)
            counts["work_seconds_budget"] = budget.seconds
            write_finished(job_dir, traces)
            if len(traces) < given:
                progress.info(budget_stop_line(len(traces), given, budget.seconds))
                # What this job does is done: its last line says so, not the time the rest
                # would take.
                reporter.totals.update(reporter.done)
        reporter.emit()
    window = tokenizer.model_max_length
    if whole:
        counts["scored_traces"] = write_trace_scores(job_dir, settings.evaluator, traces, rewards,
                                                     stats, lengths, untrained)
        counts["truncated_traces"] = sum(lengths[t.id] > window for t in traces)
        progress.info(f"scored {len(traces)} traces ({counts['truncated_traces']} longer than "
                      f"the {window}-token window)")
    if actions:
        assert action_stats is not None
        counts["scored_actions"] = write_action_scores(job_dir, settings.evaluator, traces, raw,
                                                       action_stats, lengths)
        counts["truncated_actions"] = sum(lengths[a.id] > window for t in traces
                                          for a in t.actions())
        progress.info(f"scored {counts['scored_actions']} actions "
                      f"({counts['truncated_actions']} read in a cut window)")
    if "pair_rewards" in settings.outputs:
        pairs, encoded = encoded_pairs(job_dir, contract.BENCHMARK_PAIRS, tokenizer, audience)
        counts["scored_pairs"] = write_pair_rewards(
            job_dir, pairs, pair_rewards_from(model, encoded, tokenizer.pad_token_id, known))
        progress.info(f"scored {len(pairs)} benchmark pairs")
    return counts


@dataclass(frozen=True)
class TrainingInputs:
    """What the ``inputs`` phase of a training job read: the base model's config and tokenizer, the
    pairs (rendered and tokenised), the traces to score, and the window used."""

    config: Any
    tokenizer: Any
    train_pairs: list[Pair]
    train_encoded: list[EncodedPair]
    eval_pairs: list[Pair]
    eval_encoded: list[EncodedPair]
    traces: list[Trace]
    window: int
    truncated_pairs: int  # pairs with a side longer than the window, both splits


@dataclass(frozen=True)
class Evaluation:
    """The ``evaluation`` phase's results under the final weights: the held-out pairs' rewards
    and the display scales (``reward_stats``) of whole traces and, when trained on them, actions."""

    eval_rewards: list[tuple[float, float]]
    stats: RewardStats
    action_stats: RewardStats | None


def train_job(job_dir: Path, settings: contract.JobSettings, progress: Progress, phase: Phase
              ) -> dict[str, Any]:
    """Train a reward model on the job's pairs, then evaluate, save and score with its final
    weights; the metrics ``runner`` writes to metrics.json.

    Phases, each a step below: ``inputs`` (read and checked before the base model loads),
    ``load``, ``training``, ``save`` (the checkpoint's weights, when the settings ask for a
    checkpoint), ``evaluation`` (held-out accuracy and the display scales), ``archive`` and
    ``scoring`` (the traces, with every sequence evaluation forwarded reused). From ``save`` on the
    model holds the weights the checkpoint stores, so a scoring-only job with that checkpoint
    reports the same numbers.
    """
    device = pick_device()
    audience: Audience = settings.audience or "personal"
    base = settings.base_model
    assert base is not None
    with phase("inputs"):
        inputs = read_training_inputs(job_dir, settings, base, audience, device, progress)
    with phase("load"):
        torch.manual_seed(settings.seed)  # the new score head's initialisation
        model = load_reward_model(base, device=device, tokenizer=inputs.tokenizer)
    untrained: dict[str, float] = {}
    if "scores" in settings.outputs and inputs.traces:
        # The trust report's baseline (docs/trust.md): the same base with its fresh score head,
        # before any step, scored once on the traces the model will score. Not kept in ``known``:
        # those are the final weights' rewards. Training reseeds, so this changes nothing of it.
        with phase("untrained"), scoring_precision(settings.score_dtype, device):
            untrained, _ = score_traces_and_actions(model, inputs.tokenizer, inputs.traces,
                                                    audience, whole=True, actions=False)
            progress.info(f"scored {len(untrained)} traces with the untrained base")
    with phase("training"):
        result = train(model, inputs.train_encoded, epochs=settings.epochs, device=device,
                       pad_id=inputs.tokenizer.pad_token_id, seed=settings.seed,
                       progress=progress)
    # Every sequence forwarded under the final weights, by its tokens: forwarded once only.
    known: dict[tuple[int, ...], float] = {}
    progress.info(scoring_precision_note(settings.score_dtype, device))
    with ExitStack() as checkpoint:
        writer = store_weights(checkpoint, job_dir, settings, model, inputs, phase, progress)
        cast_parameters(model, torch.float32)  # held exactly, scored in the settings' precision
        with phase("evaluation"), scoring_precision(settings.score_dtype, device):
            evaluation = evaluate(model, inputs, known, progress)
        metrics = training_metrics(
            train_pairs=inputs.train_pairs, eval_pairs=inputs.eval_pairs,
            eval_rewards=evaluation.eval_rewards,
            excluded_cross_trace_pairs=settings.excluded_cross_trace_pairs,
            final_loss=result.final_loss, epochs=result.epochs, device=device, seconds=0.0,
            max_length=inputs.window, chat_template=template_kind(template_of(inputs.tokenizer)),
            truncated_pairs=inputs.truncated_pairs)
        if writer is not None:
            writer.finish(evaluator=settings.evaluator, audience=audience, base_model=base,
                          metrics=metrics, reward_stats=evaluation.stats,
                          action_reward_stats=evaluation.action_stats)
    if writer is not None:
        with phase("archive"):
            archive(job_dir / contract.CHECKPOINT_DIR, job_dir / contract.ARCHIVE_NAME)
    write_losses(job_dir, result.step_losses)
    with phase("scoring"), scoring_precision(settings.score_dtype, device):
        # A model trained without action comparisons has no action credit: it scores whole traces
        # only.
        counts = write_scores(job_dir, settings, model, inputs.tokenizer, audience, inputs.traces,
                              evaluation.stats, evaluation.action_stats, progress,
                              actions_need_stats=False, known=known, untrained=untrained)
    truncated = {k: v for k, v in counts.items() if k.startswith("truncated_")}
    # The loss curve the viewer draws: losses.json stays in scratch, the metrics are stored.
    return {**metrics, **truncated, "loss_curve": downsample(result.step_losses)}


def read_training_inputs(job_dir: Path, settings: contract.JobSettings, base: str,
                         audience: Audience, device: str, progress: Progress) -> TrainingInputs:
    """The ``inputs`` phase: the tokenizer, the pairs and the traces, checked against the seed's
    minimum before the model is loaded (a real base model is a large download)."""
    config = load_config(base)
    tokenizer = load_tokenizer(base, max_length=settings.max_length, config=config)
    cut_train: list[int] = []  # pairs with a side longer than the window
    cut_eval: list[int] = []
    train_pairs, train_encoded = encoded_pairs(job_dir, contract.TRAIN_PAIRS, tokenizer, audience,
                                               cut_train)
    eval_pairs, eval_encoded = encoded_pairs(job_dir, contract.EVAL_PAIRS, tokenizer, audience,
                                             cut_eval)
    traces = (traces_to_score(job_dir) if {"scores", "action_scores"} & set(settings.outputs)
              else [])
    window = record_window(job_dir, settings, tokenizer)
    progress.info(f"{len(train_pairs)} training pairs, {len(eval_pairs)} held out, "
                  f"{len(traces)} traces to score, device {device}, window {window}, "
                  f"chat template {template_kind(template_of(tokenizer))}")
    if len(train_pairs) + len(eval_pairs) < MIN_PAIRS:
        raise NotEnoughPairsError(len(train_pairs) + len(eval_pairs))
    if not train_pairs:
        raise InputError("a training job needs at least one training pair",
                         file=contract.TRAIN_PAIRS)
    return TrainingInputs(config, tokenizer, train_pairs, train_encoded, eval_pairs, eval_encoded,
                          traces, window, len(cut_train) + len(cut_eval))


def store_weights(checkpoint: ExitStack, job_dir: Path, settings: contract.JobSettings,
                  model: Any, inputs: TrainingInputs, phase: Phase, progress: Progress) -> Any:
    """Cast the trained model to the dtype the checkpoint stores (the base model's unless the
    settings say otherwise) and, when the settings ask for a checkpoint, save its weights and
    tokenizer (the ``save`` phase) into a checkpoint writer entered on ``checkpoint``: the folder
    is renamed into place whole once its stats and card are in it too. The writer, or None."""
    stored = (stored_dtype(inputs.config) if settings.checkpoint_dtype == "auto"
              else getattr(torch, settings.checkpoint_dtype))
    cast_parameters(model, stored)
    if "checkpoint" not in settings.outputs:
        return None
    writer = checkpoint.enter_context(writing_checkpoint(job_dir / contract.CHECKPOINT_DIR))
    with phase("save"):
        writer.save_model(model, inputs.tokenizer)
        progress.info(f"checkpoint weights stored in {str(stored).removeprefix('torch.')}")
    return writer


def evaluate(model: Any, inputs: TrainingInputs, known: dict[tuple[int, ...], float],
             progress: Progress) -> Evaluation:
    """The ``evaluation`` phase: the held-out pairs' rewards, and the display scales from both
    sides of a sample of the training pairs only (the seed). Every sequence forwarded is added to
    ``known``, for scoring to reuse."""
    pad_id = inputs.tokenizer.pad_token_id
    scale_pairs, action_scale_pairs = display_scale_sample([p.kind for p in inputs.train_pairs])
    scale_encoded = [inputs.train_encoded[i] for i in sorted({*scale_pairs, *action_scale_pairs})]
    evaluated = PhaseProgress(progress.info, "evaluation",
                              {"pairs": len(inputs.eval_encoded) + len(scale_encoded)},
                              work=forward_tokens(model, (*inputs.eval_encoded, *scale_encoded)))
    eval_rewards = pair_rewards_from(model, inputs.eval_encoded, pad_id, known, evaluated)
    pair_rewards_from(model, scale_encoded, pad_id, known, evaluated)
    evaluated.emit()

    def side_rewards(indices: list[int]) -> list[float]:
        return [known[tuple(ids)] for i in indices for ids in (
            inputs.train_encoded[i].chosen_ids, inputs.train_encoded[i].rejected_ids)]

    return Evaluation(eval_rewards, reward_stats(side_rewards(scale_pairs)),
                      reward_stats(side_rewards(action_scale_pairs)) if action_scale_pairs
                      else None)


def score_job(job_dir: Path, settings: contract.JobSettings, progress: Progress, phase: Phase
              ) -> dict[str, Any]:
    """Score with an existing checkpoint, as it was trained: its template, truncation, audience."""
    # The work budget counts from here: the checkpoint's load is the chunk's work too.
    budget = (None if settings.work_seconds is None
              else WorkBudget(settings.work_seconds, time.monotonic()))
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
                              saved.reward_stats, saved.action_reward_stats, progress,
                              budget=budget)
    return {**counts, "audience": audience, "device": device,
            "max_length": tokenizer.model_max_length}
