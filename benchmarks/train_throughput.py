"""Training throughput: our Bradley-Terry trainer against TRL's RewardTrainer, same model and pairs.

Both train one epoch over the same 200 pairs (a seed-0 sample of AgentProcessBench step-rating and
trace-rating pairs, rendered for a personal model and left-truncated to 1024 tokens) on the same
tiny Qwen3, from the same initial weights. TRL runs in its fastest CPU configuration (bf16 autocast,
no gradient checkpointing, constant lr 1e-5 like ours) and gets pre-tokenised ids, because it drops
long pairs instead of truncating them. Prints per-run lines, medians, and last `ratio: N`.

    .venv/bin/python benchmarks/train_throughput.py [--repeats 3] [--pairs 200]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from stash_pipeline.core.pair_builders import build_feedback_pairs
from stash_pipeline.importers import read_path
from stash_pipeline.worker.modeling import load_reward_model, load_tokenizer, tokenize
from stash_pipeline.worker.render import render_side
from stash_pipeline.worker.train import EncodedPair, train
from tiny_qwen3 import build_tiny_qwen3

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "agentprocessbench" / "hotpotqa.jsonl"
def benchmark_pairs(tokenizer, count: int) -> list[EncodedPair]:
    items = list(read_path(DATA, format="agentprocessbench"))
    pairs = build_feedback_pairs([i.trace for i in items], [f for i in items for f in i.feedback], "personal")
    sample = random.Random(0).sample(pairs, count)
    chosen = tokenize(tokenizer, [render_side(tokenizer, p.chosen, "personal") for p in sample])
    rejected = tokenize(tokenizer, [render_side(tokenizer, p.rejected, "personal") for p in sample])
    return [EncodedPair(c, r) for c, r in zip(chosen, rejected)]


def fresh_model(base: Path, tokenizer):
    torch.manual_seed(0)  # the same score-head initialisation for both trainers
    return load_reward_model(str(base), device="cpu", tokenizer=tokenizer)


def run_ours(base: Path, tokenizer, pairs: list[EncodedPair]) -> tuple[float, float]:
    model = fresh_model(base, tokenizer)
    started = time.perf_counter()
    result = train(model, pairs, epochs=1, device="cpu", pad_id=tokenizer.pad_token_id)
    return len(pairs) / (time.perf_counter() - started), result.final_loss


def run_trl(base: Path, tokenizer, pairs: list[EncodedPair], output: Path) -> tuple[float, float]:
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import RewardConfig, RewardTrainer

    model = fresh_model(base, tokenizer)
    dataset = Dataset.from_dict({"chosen_ids": [p.chosen_ids for p in pairs],
                                 "rejected_ids": [p.rejected_ids for p in pairs]})
    args = RewardConfig(
        output_dir=str(output), per_device_train_batch_size=4, learning_rate=1e-5, num_train_epochs=1,
        lr_scheduler_type="constant", warmup_steps=0, seed=0, bf16=True, use_cpu=True,
        gradient_checkpointing=False, max_length=None, center_rewards_coefficient=None,
        logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=True,
    )
    trainer = RewardTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)  # it prints every step's log dict; we read log_history
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return len(pairs) / seconds, statistics.fmean(losses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch) / "base"
        texts = [m.content for item in read_path(DATA, format="agentprocessbench") for m in item.trace.messages]
        build_tiny_qwen3(base, texts, vocab_size=4096)
        tokenizer = load_tokenizer(str(base))
        pairs = benchmark_pairs(tokenizer, args.pairs)
        tokens = sum(len(p.chosen_ids) + len(p.rejected_ids) for p in pairs) / len(pairs)
        print(f"pairs: {len(pairs)}, mean tokens a pair (both sides): {tokens:.0f}, threads: {torch.get_num_threads()}")
        ours, theirs = [], []
        for repeat in range(args.repeats):  # back to back, alternating: the machine's speed drifts
            ours.append(run_ours(base, tokenizer, pairs))
            theirs.append(run_trl(base, tokenizer, pairs, Path(scratch) / f"trl{repeat}"))
            print(f"run {repeat}: ours {ours[-1][0]:.2f} pairs/s loss {ours[-1][1]:.4f}; "
                  f"trl {theirs[-1][0]:.2f} pairs/s loss {theirs[-1][1]:.4f}")
        ours_rate = statistics.median(r for r, _ in ours)
        trl_rate = statistics.median(r for r, _ in theirs)
        print(f"ours_pairs_per_s: {ours_rate:.2f}")
        print(f"trl_pairs_per_s: {trl_rate:.2f}")
        print(f"ours_final_loss: {statistics.median(l for _, l in ours):.4f}")
        print(f"trl_final_loss: {statistics.median(l for _, l in theirs):.4f}")
        print(f"ratio: {ours_rate / trl_rate:.2f}")


if __name__ == "__main__":
    main()
