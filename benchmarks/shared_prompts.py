"""Shared prompts computed once: tokens and time of ``pair_rewards`` with and without tree rows.

The hh-rlhf preference file (``hh-rlhf/harmless-base-dev.jsonl.gz``, imported as
``stash-pipeline import --format preference --skip-invalid`` reads it: one comparison of two
alternative last assistant turns a record), rendered for a personal model with the benchmark
model's tokenizer and left-truncated to 1024 tokens. Printed: the tokens a pair's forward holds with
packing (the prompt once, ``EncodedPair.cost``) and without (both sides whole), over every pair;
then, on a seed-0 sample, the seconds of ``pair_rewards`` over the sample in training batches of
4 pairs, forward and backward (what a training step computes), and forward only under
``no_grad`` in batches of 16 (evaluation), packed and unpacked (``readout.TREE_ROWS`` off),
alternating, median over repeats, in the precision training runs in (bf16 autocast where the
device supports it). Packed and unpacked rewards must agree: within 1e-4 in fp32, 5e-2 under bf16
(relative to rewards over 1).
Last line ``packed_speedup: N`` (forward-and-backward seconds unpacked over packed).

    .venv/bin/python benchmarks/shared_prompts.py [--pairs 32] [--repeats 3] [--device cpu]
        [--model tiny] [--data DIR] [--cache DIR]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import torch

from stash_pipeline.core.pair_builders import build_feedback_pairs
from stash_pipeline.importers import read_path
from stash_pipeline.worker import readout
from stash_pipeline.worker.modeling import (
    autocast,
    load_reward_model,
    load_tokenizer,
    supports_bf16,
    tokenize,
)
from stash_pipeline.worker.render import render_side
from stash_pipeline.worker.train import EncodedPair, pair_rewards

from models import add_common_arguments, base_model, describe_device, synchronize

HH_FILE = Path("hh-rlhf") / "harmless-base-dev.jsonl.gz"


def hh_pairs(tokenizer, data: Path) -> list[EncodedPair]:
    records = list(read_path(data / HH_FILE, format="preference", skip_invalid=True))
    pairs = build_feedback_pairs([r.trace for r in records],
                                 [f for r in records for f in r.feedback])
    chosen = tokenize(tokenizer, [render_side(tokenizer, p.chosen, "personal") for p in pairs])
    rejected = tokenize(tokenizer, [render_side(tokenizer, p.rejected, "personal") for p in pairs])
    return [EncodedPair(c, r) for c, r in zip(chosen, rejected)]


def timed_rewards(model, pairs: list[EncodedPair], device: str, pad_id: int, *, trees: bool,
                  backward: bool) -> tuple[float, list[float]]:
    """Seconds for ``pair_rewards`` over ``pairs`` (with its backward, or under no_grad), and the
    rewards, chosen then rejected per pair."""
    before, readout.TREE_ROWS = readout.TREE_ROWS, trees
    size = 4 if backward else 16
    rewards: list[float] = []
    try:
        synchronize(device)
        started = time.perf_counter()
        for start in range(0, len(pairs), size):
            with torch.set_grad_enabled(backward), autocast(device):
                chosen, rejected = pair_rewards(model, pairs[start:start + size], device,
                                                pad_id=pad_id)
            if backward:
                (chosen.sum() - rejected.sum()).backward()
            rewards += [r for pair in zip(chosen.tolist(), rejected.tolist()) for r in pair]
        synchronize(device)
        return time.perf_counter() - started, rewards
    finally:
        readout.TREE_ROWS = before
        model.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--pairs", type=int, default=32, help="pairs timed (a seed-0 sample)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    device = args.device
    base = base_model(args.model, args.data, args.cache)
    tokenizer = load_tokenizer(str(base))
    pairs = hh_pairs(tokenizer, args.data)
    whole = sum(len(p.chosen_ids) + len(p.rejected_ids) for p in pairs) / len(pairs)
    packed = sum(p.cost for p in pairs) / len(pairs)
    print(f"hh-rlhf: {len(pairs)} pairs; tokens a pair unpacked {whole:.1f}, packed {packed:.1f} "
          f"({1 - packed / whole:.1%} fewer); device {describe_device(device)}; model {args.model}")
    print(f"tokens_per_pair_unpacked: {whole:.1f}")
    print(f"tokens_per_pair_packed: {packed:.1f}")

    sample = random.Random(0).sample(pairs, min(args.pairs, len(pairs)))
    torch.manual_seed(0)
    model = load_reward_model(str(base), device=device, tokenizer=tokenizer)
    model.eval()  # dropout off, as training runs
    pad_id = tokenizer.pad_token_id
    tolerance = 5e-2 if supports_bf16(device) else 1e-4
    seconds: dict[tuple[bool, bool], list[float]] = {}
    for repeat in range(args.repeats):  # alternating: a shared machine's speed drifts
        gaps = []
        for backward in (True, False):
            results = {trees: timed_rewards(model, sample, device, pad_id, trees=trees,
                                            backward=backward) for trees in (False, True)}
            gap = max(abs(a - b) / max(1.0, abs(b))
                      for a, b in zip(results[False][1], results[True][1]))
            if gap > tolerance:
                raise SystemExit(f"packed and unpacked rewards differ by {gap} (relative)")
            gaps.append(gap)
            for trees, (spent, _) in results.items():
                seconds.setdefault((backward, trees), []).append(spent)
        print(f"run {repeat}: largest relative reward gap {max(gaps):.1e}; " + "; ".join(
            f"{'train' if b else 'eval'} {'packed' if t else 'unpacked'} {s[-1]:.2f} s"
            for (b, t), s in seconds.items()), flush=True)
    median = {key: statistics.median(values) for key, values in seconds.items()}
    for backward in (True, False):
        kind = "forward_backward" if backward else "forward"
        print(f"{kind}_seconds_unpacked: {median[backward, False]:.3f}")
        print(f"{kind}_seconds_packed: {median[backward, True]:.3f}")
    print(f"forward_speedup: {median[False, False] / median[False, True]:.2f}")
    print(f"packed_speedup: {median[True, False] / median[True, True]:.2f}")


if __name__ == "__main__":
    main()
