"""Aten operations launched per training pair and per scored action: the GPU's launch count,
counted on a CPU (issue 42's proxy, which CI holds without a GPU).

On a GPU the worker's step was launch-bound (host 4.3 s against 1.5 s of GPU time), so the number
of operations a pair costs is what its speed follows, and unlike seconds it does not drift. Counted
with ``torch.profiler`` (every ``aten::`` event, nested ones included) on a model with
Qwen3-0.6B's widths and two layers, at the budgets an accelerator uses (forwards of 16,384 tokens;
backward groups of ``train.ACCELERATOR_BACKWARD_TOKENS``), bf16 products, over two optimizer
steps after a warm-up step, each step 4 pairs whose sides fill the window (the seed's shape):

  today  the model's own modules under bf16 autocast, a forward and backward per pair (the path
         before issue 42: backward groups of 2,048 tokens); bf16 whether or not this CPU has it
         (``modeling.supports_bf16``), as on an accelerator: without it the worker's autocast is
         off, today's path runs in fp32 with none of its casts (1,722 a pair, not 2,098) and the
         ratio would measure the CPU, not the paths
  ours   the fast decoder over its compute copy (``decoder.runs_fast``): each layer, the readout
         and the loss one autograd function with its backward written out, AdamW and clipping
         over the copy's flat master buffer (the fused layers whatever
         ``decoder.AUTOGRAD_LAYER_DEVICES`` chooses for the CPU, and the last layer whole
         whatever ``decoder.LAST_LAYER_AT_READS_DEVICES`` does, as an accelerator runs them)

Scoring: one forward of 8 windows with 4 action reads each, without gradients, both paths.
``stash_pipeline_tests/worker/test_operation_counts.py`` fails if ours rises above ``CEILING`` or
today's falls under ``MIN_PAIR_RATIO`` times ours.
Prints today's counts first, then ours; last line ``ops_per_pair_ratio: N`` (today over ours).

    .venv/bin/python benchmarks/operation_counts.py [--window 1024] [--top 12] [--layers 2]
        [--dispatched]
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from contextlib import nullcontext
from unittest import mock

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForSequenceClassification

from stash_pipeline.core.training_settings import BATCH_SIZE, MAX_LENGTH
from stash_pipeline.worker import decoder, modeling
from stash_pipeline.worker.batching import ACCELERATOR_BATCH_TOKENS, Row, read_rows
from stash_pipeline.worker.decoder import training_copy
from stash_pipeline.worker.train import (
    ACCELERATOR_BACKWARD_TOKENS,
    CPU_BACKWARD_TOKENS,
    EncodedPair,
    make_optimizer,
    train_step,
)

from models import config_for

# Aten operations per pair and per scored action that ours may not exceed (the test's ceilings):
# what it measured with the written-out backward (364 a pair, 7.6 an action, torch 2.13), plus a
# little room for a library's own changes. Today's path measured 2,104 and 24.7.
CEILING = {"per_pair": 390, "per_action": 8.5}
# Today's count over ours that the test requires: issue 42's aim of 5x fewer a pair.
MIN_PAIR_RATIO = 5.0
VOCAB = 4096
STEPS = 2
ACTIONS_PER_ROW = 4
SCORED_ROWS = 8


LAYERS = 2


def two_layer_model(layers: int | None = None) -> torch.nn.Module:
    """Qwen3-0.6B's widths with ``LAYERS`` layers (or ``layers``)."""
    config = config_for("qwen3-0.6b-shape", VOCAB)
    config.num_hidden_layers, config.num_labels, config.pad_token_id = layers or LAYERS, 1, 0
    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_config(config, attn_implementation="sdpa")


def full_windows(count: int, window: int, rng: random.Random) -> list[EncodedPair]:
    side = lambda: [rng.randrange(1, VOCAB) for _ in range(window)]  # noqa: E731
    return [EncodedPair(side(), side()) for _ in range(count)]


def aten_events(events, *, dispatched_only: bool = False) -> Counter:
    """Counts of ``aten::`` events; ``dispatched_only``: only those called from Python or an
    autograd node, not from inside another aten operation (a CPU kernel's own sub-operations,
    such as the CPU's fused AdamW looping over tensors, are not launches on a GPU)."""
    return Counter(e.name for e in events if e.name.startswith("aten::") and not (
        dispatched_only and e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::")))


def training_ops(fast: bool, window: int = MAX_LENGTH, dispatched_only: bool = False) -> Counter:
    """Aten events of ``STEPS`` optimizer steps of ``BATCH_SIZE`` full-window pairs. Budgets
    scale with ``window`` so that a shorter window (a quick test) groups pairs as 1024 does."""
    scale = window / MAX_LENGTH
    backward = int((ACCELERATOR_BACKWARD_TOKENS if fast else CPU_BACKWARD_TOKENS) * scale)
    forward = int(ACCELERATOR_BATCH_TOKENS * scale)
    rng = random.Random(0)
    batches = [full_windows(BATCH_SIZE, window, rng) for _ in range(STEPS + 1)]
    model = two_layer_model().train()
    before, decoder.FAST_DECODER = decoder.FAST_DECODER, fast
    # Today's autocast in bf16 on any CPU (the module docstring says why); ours is bf16 anyway,
    # and trains through the fused layers, the last one whole, as an accelerator does, whatever
    # the CPU's choice (decoder.AUTOGRAD_LAYER_DEVICES, decoder.LAST_LAYER_AT_READS_DEVICES).
    bf16 = mock.patch.object(modeling, "supports_bf16", lambda device: True)
    fused = mock.patch.multiple(decoder, AUTOGRAD_LAYER_DEVICES=frozenset(),
                                LAST_LAYER_AT_READS_DEVICES=frozenset())
    try:
        with bf16, fused, training_copy(model, torch.bfloat16) if fast else nullcontext() as copy:
            optimizer = make_optimizer(model, "cpu", copy)
            def step(batch: list[EncodedPair]) -> None:
                train_step(model, optimizer, batch, device="cpu", pad_id=0,
                           backward_tokens=backward, batch_tokens=forward, copy=copy)
            step(batches[0])  # the optimizer's states are made in the first step
            with profile(activities=[ProfilerActivity.CPU]) as profiled:
                for batch in batches[1:]:
                    step(batch)
    finally:
        decoder.FAST_DECODER = before
    return aten_events(profiled.events(), dispatched_only=dispatched_only)


def scoring_ops(fast: bool, window: int = MAX_LENGTH, dispatched_only: bool = False) -> Counter:
    """Aten events of reading ``ACTIONS_PER_ROW`` actions in each of ``SCORED_ROWS`` windows, one
    forward, under bf16 autocast as on an accelerator."""
    rng = random.Random(1)
    rows = []
    for r in range(SCORED_ROWS):
        ids = tuple(rng.randrange(1, VOCAB) for _ in range(window))
        ends = sorted(rng.sample(range(window // 2, window), ACTIONS_PER_ROW - 1)) + [window - 1]
        rows.append(Row(ids, tuple((end, (r, end)) for end in ends)))
    model = two_layer_model().eval()
    before, decoder.FAST_DECODER = decoder.FAST_DECODER, fast
    # The last layer whole, as on an accelerator (decoder.LAST_LAYER_AT_READS_DEVICES).
    whole = mock.patch.object(decoder, "LAST_LAYER_AT_READS_DEVICES", frozenset())
    try:
        with whole, torch.autocast("cpu", dtype=torch.bfloat16):
            read_rows(model, rows, pad_id=0, batch_tokens=SCORED_ROWS * window)  # warm-up
            with profile(activities=[ProfilerActivity.CPU]) as profiled:
                read_rows(model, rows, pad_id=0, batch_tokens=SCORED_ROWS * window)
    finally:
        decoder.FAST_DECODER = before
    return aten_events(profiled.events(), dispatched_only=dispatched_only)


def per_pair(events: Counter) -> float:
    return sum(events.values()) / (STEPS * BATCH_SIZE)


def per_action(events: Counter) -> float:
    return sum(events.values()) / (SCORED_ROWS * ACTIONS_PER_ROW)


def main() -> None:
    global LAYERS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=MAX_LENGTH,
                        help="tokens a side holds (budgets scale with it)")
    parser.add_argument("--top", type=int, default=12, help="operations listed per path")
    parser.add_argument("--layers", type=int, default=LAYERS, help="decoder layers")
    parser.add_argument("--dispatched", action="store_true",
                        help="count only operations dispatched from Python or autograd")
    args = parser.parse_args()
    LAYERS = args.layers
    print(f"Qwen3-0.6B's widths, {LAYERS} layers, {BATCH_SIZE} pairs a step of two "
          f"{args.window}-token sides, {STEPS} steps counted; scoring {SCORED_ROWS} windows x "
          f"{ACTIONS_PER_ROW} actions{'; dispatched only' if args.dispatched else ''}; torch "
          f"{torch.__version__}", flush=True)
    counts = {}
    for label, fast in (("today", False), ("ours", True)):
        training = training_ops(fast, args.window, args.dispatched)
        scoring = scoring_ops(fast, args.window, args.dispatched)
        counts[label] = per_pair(training), per_action(scoring)
        top = ", ".join(f"{name.removeprefix('aten::')} {count / (STEPS * BATCH_SIZE):.0f}"
                        for name, count in training.most_common(args.top))
        print(f"{label}_ops_per_pair: {counts[label][0]:.0f} ({top})")
        print(f"{label}_ops_per_action: {counts[label][1]:.1f}", flush=True)
    print(f"ops_per_action_ratio: {counts['today'][1] / counts['ours'][1]:.2f}")
    print(f"ops_per_pair_ratio: {counts['today'][0] / counts['ours'][0]:.2f}")


if __name__ == "__main__":
    main()
