"""The seed's metrics table, every field with its exact meaning, in one function."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stash_pipeline.core.pair_builders import pair_tools
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.release_gate import slice_keys
from stash_pipeline.core.split import unavailable_reason
from stash_pipeline.core.training_settings import MAX_LENGTH

# A job written without held-out pairs although its pairs would split (not the pipeline's split).
NO_EVAL_PAIRS_GIVEN = "the job was given no held-out pairs"
# Version of the action-scoring method a model was trained for; the seed's action_scoring_version.
ACTION_SCORING_VERSION = 1


def pairwise_accuracy(rewards: Sequence[tuple[float, float]]) -> float | None:
    """Fraction of pairs with r(chosen) > r(rejected), strictly (a tie is a miss); None for none."""
    if not rewards:
        return None
    return sum(1 for chosen, rejected in rewards if chosen > rejected) / len(rewards)


def training_metrics(*, train_pairs: Sequence[Pair], eval_pairs: Sequence[Pair],
                     eval_rewards: Sequence[tuple[float, float]], excluded_cross_trace_pairs: int,
                     final_loss: float | None, epochs: int, device: str, seconds: float,
                     max_length: int = MAX_LENGTH, chat_template: str | None = None,
                     truncated_pairs: int | None = None) -> dict[str, Any]:
    """metrics.json of a training job. ``eval_rewards`` are (r(chosen), r(rejected)) per eval pair.

    ``seconds`` is the worker's time including scoring and the checkpoint archive (and its upload
    when the worker does that itself). ``max_length`` is the window used (tokens kept from each
    input's end), ``chat_template`` the rendering's kind (``render.template_kind``),
    ``truncated_pairs`` the pairs (training and held out) with a side longer than the window.
    """
    if len(eval_rewards) != len(eval_pairs):
        raise ValueError(f"{len(eval_rewards)} eval rewards for {len(eval_pairs)} eval pairs")
    scored = list(zip(eval_pairs, eval_rewards))
    action_eval = [r for p, r in scored if p.kind == "action"]
    tool_eval = [r for p, r in scored if p.kind == "action" and p.is_tool_call]
    action_train_pairs = sum(1 for p in train_pairs if p.kind == "action")
    return {
        "num_pairs": len(train_pairs) + len(eval_pairs),  # the seed's: held-out pairs included
        "train_pairs": len(train_pairs),
        "eval_pairs": len(eval_pairs),
        # Why there is no eval_accuracy (the split found no independent held-out traces), or null.
        "eval_unavailable_reason": None if eval_pairs else (
            unavailable_reason(train_pairs) or NO_EVAL_PAIRS_GIVEN),
        # No independent split -> no eval pairs -> null, never a number made up from training pairs.
        "eval_accuracy": pairwise_accuracy(eval_rewards),
        "action_scoring_version": ACTION_SCORING_VERSION if action_train_pairs else None,
        "action_train_pairs": action_train_pairs,
        "action_eval_pairs": len(action_eval),
        "action_eval_accuracy": pairwise_accuracy(action_eval),
        "tool_eval_pairs": len(tool_eval),
        "tool_eval_accuracy": pairwise_accuracy(tool_eval),
        "excluded_cross_trace_pairs": excluded_cross_trace_pairs,
        "final_loss": final_loss,
        "epochs": epochs,
        "device": device,
        "seconds": seconds,
        "max_length": max_length,
        "chat_template": chat_template,
        # Pairs (num_pairs') with a side longer than max_length: it lost its beginning.
        "truncated_pairs": truncated_pairs,
        # Held-out pairs and how many were right, per tool, domain and agent slice (trust report).
        "eval_slices": eval_slices(eval_pairs, eval_rewards),
    }


def eval_slices(pairs: Sequence[Pair], rewards: Sequence[tuple[float, float]]
                ) -> list[dict[str, Any]]:
    """[{slice, value, pairs, correct}] of the held-out pairs per slice (``slice_keys``: each tool
    their sides call, domain, agent), a tie counted wrong as in ``pairwise_accuracy``."""
    counts: dict[tuple[str, str], list[int]] = {}
    for pair, (chosen, rejected) in zip(pairs, rewards):
        try:
            tools = pair_tools(pair)
        except KeyError:  # a side naming an action its trace lacks: its stored tool slice only
            tools = ()
        for key in slice_keys(pair.slices, tools):
            tally = counts.setdefault(key, [0, 0])
            tally[0] += 1
            tally[1] += chosen > rejected
    return [{"slice": kind, "value": value, "pairs": n, "correct": correct}
            for (kind, value), (n, correct) in sorted(counts.items())]
