"""The two jobs a job directory asks for: training (then evaluating and scoring with the new
weights) and scoring with a checkpoint, each conducted phase by phase.

``runner.py`` imports this module only once the settings were read, so a job whose settings are
invalid fails in a fraction of a second instead of after torch's and transformers' imports. Like
the runner, it only conducts: inputs are read by ``job_inputs``, outputs written by ``job_outputs``
and ``checkpoint``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
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
from stash_pipeline.worker.evaluation import forward_tokens, pair_rewards_from
from stash_pipeline.worker.job_inputs import encoded_pairs, record_window, traces_to_score
from stash_pipeline.worker.job_outputs import (
    write_action_scores,
    write_losses,
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
from stash_pipeline.worker.progress import PhaseProgress, Progress
from stash_pipeline.worker.render import Audience, template_kind, template_of
from stash_pipeline.worker.scoring import score_traces_and_actions
from stash_pipeline.worker.train import train

# What runner.Phases is: phase(name) times and logs the phase it wraps.
Phase = Callable[[str], AbstractContextManager[None]]


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
        rewards, raw = score_traces_and_actions(model, tokenizer, traces, audience, whole=whole,
                                                actions=actions, known=known, progress=reporter,
                                                lengths=lengths)
        reporter.emit()
    window = tokenizer.model_max_length
    if whole:
        counts["scored_traces"] = write_trace_scores(job_dir, settings.evaluator, traces, rewards,
                                                     stats, lengths)
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


def train_job(job_dir: Path, settings: contract.JobSettings, progress: Progress, phase: Phase
              ) -> dict[str, Any]:
    device = pick_device()
    audience: Audience = settings.audience or "personal"
    base = settings.base_model
    assert base is not None
    with phase("inputs"):
        config = load_config(base)
        tokenizer = load_tokenizer(base, max_length=settings.max_length, config=config)
        cut_train: list[int] = []  # pairs with a side longer than the window
        cut_eval: list[int] = []
        train_pairs, train_encoded = encoded_pairs(job_dir, contract.TRAIN_PAIRS, tokenizer,
                                                   audience, cut_train)
        eval_pairs, eval_encoded = encoded_pairs(job_dir, contract.EVAL_PAIRS, tokenizer, audience,
                                                 cut_eval)
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
                                      work=forward_tokens(model, (*eval_encoded, *scale_encoded)))
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
            max_length=window, chat_template=template_kind(template_of(tokenizer)),
            truncated_pairs=len(cut_train) + len(cut_eval))
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
        counts = write_scores(job_dir, settings, model, tokenizer, audience, traces, stats,
                              action_stats, progress, actions_need_stats=False, known=known)
    truncated = {k: v for k, v in counts.items() if k.startswith("truncated_")}
    # The loss curve the viewer draws: losses.json stays in scratch, the metrics are stored.
    return {**metrics, **truncated, "loss_curve": downsample(result.step_losses)}


def score_job(job_dir: Path, settings: contract.JobSettings, progress: Progress, phase: Phase
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
