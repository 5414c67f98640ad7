"""Training throughput: our Bradley-Terry trainer against TRL's RewardTrainer, same model and pairs.

Both train one epoch over the same pairs (a seed-0 sample of AgentProcessBench step-rating and
trace-rating pairs, rendered for a personal model and left-truncated to 1024 tokens) from the same
initial weights. TRL runs in its fastest configuration (bf16 autocast, no gradient checkpointing,
constant lr 1e-5 like ours) and gets pre-tokenised ids, because it drops long pairs instead of
truncating them; it is skipped when trl is not installed (``--trl off`` skips it anyway).

Reports pairs/s, model FLOPs utilisation (6 x non-embedding parameters x tokens, against the
device's bf16 peak; GPUs only unless ``--peak-tflops``) and peak memory, per trainer. ``--today``
also trains through the model's own modules with a forward and backward per pair (the path before
issue 42: ``decoder.FAST_DECODER`` off, groups of 2,048 tokens). ``--compare-layers`` also trains
through the layers the device does not use by default (``decoder.AUTOGRAD_LAYER_DEVICES``: the
fused layers' written-out backward on a CPU, autograd's backward over ``layer_forward`` on a GPU)
and prints ``fused_over_autograd`` (pairs/s, with the range over the repeats): the measurement
that chooses each device's layers. ``--compare-last-layer`` also trains with the last layer run
the other way than the device's default (``decoder.LAST_LAYER_AT_READS_DEVICES``: at the read
tokens only, or over every token) and prints ``at_reads_over_whole`` (pairs/s, with the range)
and the same in CPU seconds (``at_reads_over_whole_cpu``), the measurement that chooses it.
``--compile`` also trains with ``torch.compile`` of the fast decoder's layer
(``decoder.COMPILE_DEVICES`` holding the device): one run first to compile (not timed as
throughput), then timed runs; it prints ``compile_seconds`` (what the first run's training took
beyond a timed one), ``compile_gain`` (compiled pairs/s over eager) and ``compile_pays`` (``yes``
when the gain is at least 5% and saves more than the compile costs over the seed's default job of
4000 pairs). ``--flops`` also trains each once more under ``torch.utils.flop_counter`` and prints
``{name}_gflops_per_pair`` (the matrix products' FLOPs a pair, forward and backward: a count that
does not drift with the machine's load). ``--profile DIR`` writes a torch.profiler trace of a few
steps and prints the top operators. Last line ``ratio: N`` (ours over TRL), or
``ours_pairs_per_s: N`` without TRL.

    .venv/bin/python benchmarks/train_throughput.py [--device cuda] [--model qwen3-0.6b-shape]
        [--pairs 200] [--repeats 3] [--data DIR] [--today] [--compare-layers]
        [--compare-last-layer] [--compile] [--flops] [--profile DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from stash_pipeline.core.pair_builders import build_feedback_pairs
from stash_pipeline.core.training_settings import DEFAULT_MAX_PAIRS
from stash_pipeline.importers import read_path
from stash_pipeline.worker import decoder
from stash_pipeline.worker.decoder import training_copy
from stash_pipeline.worker.modeling import load_reward_model, load_tokenizer, tokenize
from stash_pipeline.worker.render import render_side
from stash_pipeline.worker.train import (
    BY_DEVICE,
    CPU_BACKWARD_TOKENS,
    EncodedPair,
    compute_dtype,
    make_optimizer,
    shuffled_batches,
    train,
    train_step,
)

from models import (
    APB_FILE,
    add_common_arguments,
    base_model,
    describe_device,
    mfu,
    non_embedding_parameters,
    peak_memory_gib,
    reset_peak_memory,
    switched,
    synchronize,
)


def benchmark_pairs(tokenizer, data: Path, count: int) -> list[EncodedPair]:
    items = list(read_path(data / APB_FILE, format="agentprocessbench"))
    pairs = build_feedback_pairs([i.trace for i in items], [f for i in items for f in i.feedback],
                                 "personal")
    sample = random.Random(0).sample(pairs, min(count, len(pairs)))
    chosen = tokenize(tokenizer, [render_side(tokenizer, p.chosen, "personal") for p in sample])
    rejected = tokenize(tokenizer, [render_side(tokenizer, p.rejected, "personal") for p in sample])
    return [EncodedPair(c, r) for c, r in zip(chosen, rejected)]


def fresh_model(base: Path, tokenizer, device: str):
    torch.manual_seed(0)  # the same score-head initialisation for both trainers
    return load_reward_model(str(base), device=device, tokenizer=tokenizer)


def run_ours(base: Path, tokenizer, pairs: list[EncodedPair], device: str, *,
             backward_tokens: int | None | str) -> tuple[float, float, float, float]:
    model = fresh_model(base, tokenizer, device)
    reset_peak_memory(device)
    synchronize(device)
    started, started_cpu = time.perf_counter(), time.process_time()
    result = train(model, pairs, epochs=1, device=device, pad_id=tokenizer.pad_token_id,
                   backward_tokens=backward_tokens)
    synchronize(device)
    seconds = time.perf_counter() - started
    return (len(pairs) / seconds, result.final_loss, peak_memory_gib(device)[1],
            time.process_time() - started_cpu)


def run_trl(base: Path, tokenizer, pairs: list[EncodedPair], output: Path, device: str
            ) -> tuple[float, float, float, float]:
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import RewardConfig, RewardTrainer

    model = fresh_model(base, tokenizer, device)
    dataset = Dataset.from_dict({"chosen_ids": [p.chosen_ids for p in pairs],
                                 "rejected_ids": [p.rejected_ids for p in pairs]})
    args = RewardConfig(
        output_dir=str(output), per_device_train_batch_size=4, learning_rate=1e-5,
        num_train_epochs=1, lr_scheduler_type="constant", warmup_steps=0, seed=0, bf16=True,
        use_cpu=device == "cpu", gradient_checkpointing=False, max_length=None,
        center_rewards_coefficient=None, logging_steps=1, save_strategy="no", report_to=[],
        disable_tqdm=True,
    )
    trainer = RewardTrainer(model=model, args=args, train_dataset=dataset,
                            processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)  # it prints every step's log dict; we read log_history
    reset_peak_memory(device)
    synchronize(device)
    started, started_cpu = time.perf_counter(), time.process_time()
    trainer.train()
    synchronize(device)
    seconds = time.perf_counter() - started
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return (len(pairs) / seconds, statistics.fmean(losses), peak_memory_gib(device)[1],
            time.process_time() - started_cpu)


def profile(base: Path, tokenizer, pairs: list[EncodedPair], device: str, directory: Path,
            steps: int = 4) -> None:
    """A torch.profiler trace of ``steps`` training steps after two warm-up steps."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    model = fresh_model(base, tokenizer, device)
    model.train()
    batches = shuffled_batches(len(pairs), random.Random(0))[: steps + 2]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with training_copy(model, compute_dtype(model, device, True)) as copy:
        optimizer = make_optimizer(model, device, copy)
        def step(batch: list[int]) -> None:
            train_step(model, optimizer, [pairs[i] for i in batch], device=device,
                       pad_id=tokenizer.pad_token_id, copy=copy)
        for batch in batches[:2]:
            step(batch)
        synchronize(device)
        with torch_profile(activities=activities, record_shapes=False) as prof:
            for batch in batches[2:]:
                step(batch)
            synchronize(device)
    directory.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(directory / "train_trace.json"))
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=25))


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--trl", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--today", action="store_true",
                        help="also train through the model's modules, a pair at a time")
    parser.add_argument("--compare-layers", action="store_true",
                        help="also train through the layers this device does not use by default "
                             "(decoder.AUTOGRAD_LAYER_DEVICES: the fused ones on a CPU, "
                             "autograd's elsewhere)")
    parser.add_argument("--compare-last-layer", action="store_true",
                        help="also train with the last layer the other way than this device's "
                             "default (decoder.LAST_LAYER_AT_READS_DEVICES: at the read tokens "
                             "only, or whole)")
    parser.add_argument("--compile", action="store_true",
                        help="also train with torch.compile of the fast decoder's layer")
    parser.add_argument("--flops", action="store_true",
                        help="also count each trainer's matrix-product FLOPs a pair (one more run "
                             "each)")
    parser.add_argument("--backward-tokens", default=BY_DEVICE,
                        help="tokens a forward-and-backward holds (default by device); 'none': "
                             "the whole batch at once")
    parser.add_argument("--profile", type=Path, default=None,
                        help="folder for a torch.profiler trace")
    args = parser.parse_args()
    device = args.device
    backward_tokens = (None if args.backward_tokens == "none" else args.backward_tokens
                       if args.backward_tokens == BY_DEVICE else int(args.backward_tokens))
    with_trl = args.trl == "on" or (args.trl == "auto"
                                    and importlib.util.find_spec("trl") is not None)
    with tempfile.TemporaryDirectory() as scratch:
        base = base_model(args.model, args.data, args.cache)
        tokenizer = load_tokenizer(str(base))
        pairs = benchmark_pairs(tokenizer, args.data, args.pairs)
        tokens = sum(len(p.chosen_ids) + len(p.rejected_ids) for p in pairs)
        probe = fresh_model(base, tokenizer, "cpu")
        flops = 6 * non_embedding_parameters(probe) * tokens
        print(f"model {args.model}: {non_embedding_parameters(probe) / 1e6:.0f}M parameters "
              f"outside the embedding; {len(pairs)} pairs, {tokens / len(pairs):.0f} tokens a pair "
              f"(both sides); device {describe_device(device)}; backward tokens {backward_tokens}",
              flush=True)
        del probe
        ours = lambda: run_ours(base, tokenizer, pairs, device,  # noqa: E731
                                backward_tokens=backward_tokens)
        configs = {"ours": ours}
        if args.today:
            configs["today"] = switched(decoder, "FAST_DECODER", False)(
                lambda: run_ours(base, tokenizer, pairs, device,
                                 backward_tokens=CPU_BACKWARD_TOKENS))
        kind = torch.device(device).type
        other = "fused" if kind in decoder.AUTOGRAD_LAYER_DEVICES else "autograd"
        if args.compare_layers:  # the layers this device does not train through by default
            configs[f"ours_{other}"] = switched(
                decoder, "AUTOGRAD_LAYER_DEVICES",
                frozenset() if other == "fused" else frozenset({kind}))(ours)
        at_reads = kind in decoder.LAST_LAYER_AT_READS_DEVICES
        last_other = "ours_whole_last_layer" if at_reads else "ours_last_layer_at_reads"
        if args.compare_last_layer:
            configs[last_other] = switched(
                decoder, "LAST_LAYER_AT_READS_DEVICES",
                decoder.LAST_LAYER_AT_READS_DEVICES ^ frozenset({kind}))(ours)
        compiled = switched(decoder, "COMPILE_DEVICES", frozenset({torch.device(device).type}))(
            ours)
        compile_first = None
        if args.compile:
            compile_first = compiled()
            print(f"compiled first run (compiling): {compile_first[0]:.2f} pairs/s, "
                  f"{len(pairs) / compile_first[0]:.1f} s of training", flush=True)
            configs["ours_compiled"] = compiled
        if with_trl:
            configs["trl"] = lambda: run_trl(base, tokenizer, pairs, Path(scratch) / "trl", device)
        runs: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in configs}
        # Back to back, alternating: a shared machine's speed drifts.
        for repeat in range(args.repeats):
            for name, run in configs.items():
                runs[name].append(run())
            print(f"run {repeat}: " + "; ".join(
                f"{name} {r[-1][0]:.2f} pairs/s ({r[-1][3]:.1f} CPU-s) loss {r[-1][1]:.4f}"
                for name, r in runs.items()) + f"; load average {os.getloadavg()[0]:.1f}",
                flush=True)
        if args.flops:
            from torch.utils.flop_counter import FlopCounterMode

            for name, run in configs.items():
                counter = FlopCounterMode(display=False)
                with counter:
                    run()
                print(f"{name}_gflops_per_pair: {counter.get_total_flops() / len(pairs) / 1e9:.2f}",
                      flush=True)
        memory_name = peak_memory_gib(device)[0]
        for name, results in runs.items():
            rate = median([r[0] for r in results])
            utilisation = mfu(flops, len(pairs) / rate, device, args.peak_tflops)
            print(f"{name}_pairs_per_s: {rate:.2f}")
            print(f"{name}_final_loss: {median([r[1] for r in results]):.4f}")
            print(f"{name}_mfu: {utilisation:.3f}" if utilisation is not None
                  else f"{name}_mfu: n/a")
            print(f"{name}_{memory_name}: {max(r[2] for r in results):.2f}")
            print(f"{name}_cpu_s: {median([r[3] for r in results]):.1f} (range "
                  f"{min(r[3] for r in results):.1f}-{max(r[3] for r in results):.1f})",
                  flush=True)
        rate = median([r[0] for r in runs["ours"]])
        if args.today:
            print(f"today_ratio: {rate / median([r[0] for r in runs['today']]):.2f}")
        if args.compare_layers:
            fused, autograd = (([r[0] for r in runs[name]] for name in ("ours_fused", "ours"))
                               if other == "fused" else
                               ([r[0] for r in runs[name]] for name in ("ours", "ours_autograd")))
            print(f"fused_over_autograd: {median(fused) / median(autograd):.2f} (range "
                  f"{min(fused) / max(autograd):.2f}-{max(fused) / min(autograd):.2f})")
        if args.compare_last_layer:
            for suffix, at in (("", 0), ("_cpu", 3)):
                reads, whole = (([r[at] for r in runs[name]] for name in ("ours", last_other))
                                if at_reads else
                                ([r[at] for r in runs[name]] for name in (last_other, "ours")))
                if at:  # CPU seconds: fewer is faster
                    reads, whole = [1 / c for c in reads], [1 / c for c in whole]
                print(f"at_reads_over_whole{suffix}: {median(reads) / median(whole):.2f} (range "
                      f"{min(reads) / max(whole):.2f}-{max(reads) / min(whole):.2f})")
        if compile_first is not None:
            steady = median([r[0] for r in runs["ours_compiled"]])
            compile_seconds = len(pairs) / compile_first[0] - len(pairs) / steady
            gain = steady / rate
            saved = DEFAULT_MAX_PAIRS / rate - DEFAULT_MAX_PAIRS / steady
            print(f"compile_seconds: {compile_seconds:.1f}")
            print(f"compile_gain: {gain:.3f}")
            print(f"compile_saves_s_per_4000_pairs: {saved:.1f}")
            print(f"compile_pays: {'yes' if saved > compile_seconds and gain >= 1.05 else 'no'}",
                  flush=True)
        if args.profile:
            profile(base, tokenizer, pairs, device, args.profile)
        if with_trl:
            print(f"ratio: {rate / median([r[0] for r in runs['trl']]):.2f}")
        else:
            print(f"ours_pairs_per_s: {rate:.2f}")


if __name__ == "__main__":
    main()
