"""Peak memory of one training step at the seed's fixed settings: today's path against ours.

Two steps of 4 pairs whose 8 sides each fill the 1024-token window (the seed's worst case), on
``--model`` (default Qwen3-0.6B's exact shape, random weights), fp32 master weights and fused
AdamW, as the worker trains; the second step holds the optimizer's states. Two paths:
``modules_per_pair`` (the model's own modules under bf16 autocast, forward and backward per group
of at most two windows: the path before issue 42) and ``ours`` (the fast decoder over its bf16
compute copy, the whole batch of 8 windows in one forward and backward, as on an accelerator).

On CPU the count is exact and costs nothing: ``PeakTensorMemory`` adds up live tensor storages op
by op under ``FakeTensorMode`` (no memory is allocated, nothing computed). ``--real`` runs the same
step on real tensors (the same count, plus the process's peak RSS; at 0.6B it needs about 16 GB and
minutes of CPU). On CUDA it runs for real and also prints ``torch.cuda.max_memory_allocated``.
Last line ``peak_gib: N``, the default setting's peak.

    .venv/bin/python benchmarks/train_memory.py [--device cuda] [--model tiny] [--layers N] [--real]
"""

from __future__ import annotations

import argparse
import random
import time
from contextlib import nullcontext
from unittest import mock

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from transformers import AutoModelForSequenceClassification

from stash_pipeline.core.training_settings import BATCH_SIZE, MAX_LENGTH
from stash_pipeline.worker import decoder
from stash_pipeline.worker.decoder import training_copy
from stash_pipeline.worker.train import (
    ACCELERATOR_BACKWARD_TOKENS,
    CPU_BACKWARD_TOKENS,
    EncodedPair,
    make_optimizer,
    train_step,
)

from memory_tracking import PeakTensorMemory, gib
from models import (
    MODELS,
    config_for,
    describe_device,
    peak_memory_gib,
    reset_peak_memory,
    synchronize,
)

PAD_ID = 0


def worst_case_batch(vocab_size: int) -> list[EncodedPair]:
    rng = random.Random(0)
    side = lambda: [rng.randrange(1, vocab_size) for _ in range(MAX_LENGTH)]  # noqa: E731
    return [EncodedPair(side(), side()) for _ in range(BATCH_SIZE)]


def measure(kind: str, layers: int | None, device: str, backward_tokens: int | None, fake: bool,
            fast: bool) -> tuple[float, float | None, float]:
    """(counted peak GiB, the device allocator's peak GiB or None, seconds) over two steps."""
    config = config_for(kind, 4096)
    if layers:
        config.num_hidden_layers = layers
    config.num_labels, config.pad_token_id = 1, PAD_ID
    batch = worst_case_batch(min(config.vocab_size, 4096))
    started = time.perf_counter()
    with FakeTensorMode(allow_non_fake_inputs=True) if fake else nullcontext():
        torch.manual_seed(0)
        # Initialised where it runs: 0.6B normal draws take a while on a CPU.
        with nullcontext() if fake else torch.device(device):
            model = AutoModelForSequenceClassification.from_config(config,
                                                                   attn_implementation="sdpa")
        model.train()
        tracker = PeakTensorMemory()
        tracker.track(list(model.parameters()) + list(model.buffers()))
        reset_peak_memory(device)
        # Fake tensors count an accelerator's step: its fused layers, not the CPU's choice.
        fused = (mock.patch.object(decoder, "AUTOGRAD_LAYER_DEVICES", frozenset()) if fake
                 else nullcontext())
        with tracker, fused, (training_copy(model, torch.bfloat16) if fast
                              else nullcontext()) as copy:
            optimizer = make_optimizer(model, device, copy)
            for _ in range(2):
                train_step(model, optimizer, batch, device=device, pad_id=PAD_ID,
                           backward_tokens=backward_tokens, copy=copy)
        synchronize(device)
    allocator = peak_memory_gib(device)[1] if device == "cuda" else None
    return gib(tracker.peak), allocator, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", choices=MODELS, default="qwen3-0.6b-shape")
    parser.add_argument("--layers", type=int, default=None,
                        help="fewer decoder layers (same widths)")
    parser.add_argument("--real", action="store_true",
                        help="on CPU, real tensors instead of fake ones")
    args = parser.parse_args()
    fake = args.device == "cpu" and not args.real
    print(f"model {args.model}{f' ({args.layers} layers)' if args.layers else ''}, device "
          f"{describe_device(args.device)}, {'fake' if fake else 'real'} tensors, {BATCH_SIZE} "
          f"pairs x 2 sides x {MAX_LENGTH} tokens, fp32 master weights, bf16 products, fused "
          "AdamW, two steps")
    peaks = {}
    for label, budget, fast in (("modules_per_pair", CPU_BACKWARD_TOKENS, False),
                                ("ours", ACCELERATOR_BACKWARD_TOKENS, True)):
        counted, allocator, seconds = measure(args.model, args.layers, args.device, budget, fake,
                                              fast)
        peaks[label] = counted
        print(f"peak_gib_{label}: {counted:.2f} (backward_tokens {budget}; {seconds:.0f} s)"
              + (f"; cuda max_memory_allocated {allocator:.2f} GiB" if allocator is not None
                 else ""), flush=True)
    if args.device == "cpu" and args.real:
        print(f"{peak_memory_gib('cpu')[0]}: {peak_memory_gib('cpu')[1]:.2f} (both settings, this "
              "process)")
    print(f"peak_gib: {peaks['ours']:.2f}")


if __name__ == "__main__":
    main()
