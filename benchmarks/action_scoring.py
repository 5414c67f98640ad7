"""Actions/s of our action scorer against the naive one-forward-per-action scorer (issue 3, 11).

Both start from traces and end with a raw reward per action, rendering and tokenising included, on
the same reward model (``--model``: the tiny Qwen3 or Qwen3-0.6B's exact shape, random weights;
a BPE tokenizer trained here on the data), in one run, back to back. The naive scorer is the
definition run plainly: each action's own rendering through the model's own forward, in fp32.
Ours runs in fp32 (it must give the naive scores, max abs difference printed and enforced) and in
the worker's default precision on the device (bf16 autocast on a GPU, fp32 on CPU), whose ratio is
the one reported; bf16 against fp32 also gets its Kendall tau and largest difference. Three sets,
each a seed-0 sample:

  (a) AgentProcessBench traces as they are,
  (b) tau2-bench traces as they are (airline, gpt-4o; long conversations: most actions lie beyond
      the window),
  (c) the same traces cut so that each fits the 1024-token window (messages dropped from the end).

Beyond the window every action needs its own window (a different first token changes every
state), so there the gain can only come from cheaper forwards (on a CPU ours runs the last layer
at the read tokens only, ``decoder.LAST_LAYER_AT_READS_DEVICES``) and batching by length; within
it, one forward per trace replaces one per action.

Usage: .venv/bin/python benchmarks/action_scoring.py [--device cuda] [--model qwen3-0.6b-shape]
    [--traces N] [--repeats R] [--audience A] [--data DIR]
Prints per-set rates and median times, peak memory, then ``fit_ratio: N`` (c), ``tau2_ratio: N``
(b) and last ``ratio: N`` (a).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from stash_pipeline.core.pair_builders import AUDIENCES, Audience
from stash_pipeline.core.ranking import kendall_tau
from stash_pipeline.core.traces import Trace, trace_actions
from stash_pipeline.importers import read_path
from stash_pipeline.worker.modeling import (
    load_reward_model,
    load_tokenizer,
    scoring_precision,
    tokenize,
)
from stash_pipeline.worker.render import cut_at_action, render_trace
from stash_pipeline.worker.scoring import plan_action_rows, score_trace_actions

from models import (
    APB_FILE,
    TAU2_FILE,
    add_common_arguments,
    base_model,
    describe_device,
    peak_memory_gib,
    reset_peak_memory,
    synchronize,
)

TOLERANCE = {"tiny": 1e-4, "qwen3-0.6b-shape": 1e-3}  # fp32, ours against naive


# --- data, read by the project's importers -----------------------------------------------------

def apb_traces(data: Path) -> list[Trace]:
    return [record.trace for record in read_path(data / APB_FILE, format="agentprocessbench")]


def tau2_traces(data: Path) -> list[Trace]:
    return [record.trace for record in read_path(data / TAU2_FILE, format="tau2")]


def cut_to_fit(tokenizer, trace: Trace, audience: Audience, max_length: int) -> Trace | None:
    """The longest message prefix of the trace whose whole rendering fits, if it has an action."""
    for end in range(len(trace.messages), 0, -1):
        cut = trace.with_messages(trace.messages[:end])
        if not trace_actions(cut):
            return None
        text = render_trace(tokenizer, cut, audience)
        if len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]) <= max_length:
            return cut
    return None


# --- the scorers
# ------------------------------------------------------------------------------------

@torch.inference_mode()
def naive_scores(model, tokenizer, traces: Sequence[Trace], audience: Audience,
                 device: str) -> dict[str, float]:
    """One forward per action, over that action's own rendering (the definition), through the
    model's own sequence-classification forward, with the training truncation, in fp32."""
    scores = {}
    for trace in traces:
        for action in trace.actions():
            text = render_trace(tokenizer, cut_at_action(trace, action.id), audience, open_end=True)
            ids = torch.tensor(tokenize(tokenizer, [text]), device=device)
            scores[action.id] = model(input_ids=ids).logits[0, 0].item()
    return scores


def our_scores(precision: str) -> Callable[..., dict[str, float]]:
    def score(model, tokenizer, traces: Sequence[Trace], audience: Audience,
              device: str) -> dict[str, float]:
        with scoring_precision(precision, device):
            return score_trace_actions(model, tokenizer, traces, audience)
    return score


def compare(name: str, scorers: dict[str, Callable], model, tokenizer, traces: Sequence[Trace],
            audience: Audience, device: str, repeats: int, tolerance: float) -> dict[str, float]:
    """Median seconds of each scorer; checks ours in fp32 against the naive scores."""
    actions = sum(len(t.actions()) for t in traces)
    timings: dict[str, list[float]] = {label: [] for label in scorers}
    results: dict[str, dict[str, float]] = {}
    for _ in range(repeats):
        for label, scorer in scorers.items():  # back to back: a shared machine's speed drifts
            synchronize(device)
            start = time.perf_counter()
            results[label] = scorer(model, tokenizer, traces, audience, device)
            synchronize(device)
            timings[label].append(time.perf_counter() - start)
    keys = sorted(results["naive"])
    difference = max(abs(results["ours_fp32"][k] - results["naive"][k]) for k in keys)
    if results["ours_fp32"].keys() != results["naive"].keys() or difference > tolerance:
        raise SystemExit(f"{name}: scores differ (max abs difference {difference:.2e})")
    medians = {label: statistics.median(times) for label, times in timings.items()}
    windows = sum(len(plan_action_rows(tokenizer, t, audience)[1]) for t in traces)
    rates = ", ".join(f"{label} {actions / seconds:.1f} actions/s ({seconds:.2f} s)"
                      for label, seconds in medians.items())
    print(f"{name}: {len(traces)} traces, {actions} actions ({windows} need their own window); "
          f"{rates}; fp32 max abs difference from naive {difference:.1e}", flush=True)
    if "ours_bf16" in results:
        exact = [results["ours_fp32"][k] for k in keys]
        fast = [results["ours_bf16"][k] for k in keys]
        print(f"{name}: bf16 against fp32: Kendall tau {kendall_tau(exact, fast):.4f}, largest "
              f"difference {max(abs(a - b) for a, b in zip(exact, fast)):.4f} on a spread of "
              f"{max(exact) - min(exact):.3f}")
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--traces", type=int, default=8, help="traces sampled from each source")
    parser.add_argument("--repeats", type=int, default=3)
    # Personal models read no system steps; the shared evaluator adds tau2's long policy, which
    # alone exceeds the window, so no tau2 trace could be cut to fit for set (c).
    parser.add_argument("--audience", choices=AUDIENCES, default="personal")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's)")
    args = parser.parse_args()
    audience, device = args.audience, args.device
    if args.threads:
        torch.set_num_threads(args.threads)

    rng = random.Random(0)
    apb = rng.sample(apb_traces(args.data), args.traces)
    tau2 = rng.sample(tau2_traces(args.data), args.traces)
    directory = str(base_model(args.model, args.data, args.cache))
    tokenizer = load_tokenizer(directory)
    model = load_reward_model(directory, dtype=torch.float32, device=device, tokenizer=tokenizer)
    max_length = tokenizer.model_max_length
    cuts = (cut_to_fit(tokenizer, trace, audience, max_length) for trace in apb + tau2)
    fitted = [trace for trace in cuts if trace is not None]
    default = "bfloat16" if device != "cpu" else "float32"  # the worker's "auto"
    scorers: dict[str, Callable] = {"naive": naive_scores, "ours_fp32": our_scores("float32")}
    if device != "cpu":
        scorers["ours_bf16"] = our_scores("bfloat16")
    ours = "ours_bf16" if default == "bfloat16" else "ours_fp32"
    print(f"model {args.model}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
          f"parameters, vocab {len(tokenizer)}, window {max_length}, audience {audience}, device "
          f"{describe_device(device)}, load average {os.getloadavg()[0]:.2f}; {len(fitted)} of "
          f"{2 * args.traces} traces fit once cut; ratios are naive fp32 over {ours}")
    # Warm-up: the first forwards of each shape pay for kernel selection and allocation.
    for scorer in scorers.values():
        scorer(model, tokenizer, fitted[:2] + tau2[:1], audience, device)
    reset_peak_memory(device)
    tolerance = TOLERANCE[args.model]
    sets = {"fit": ("(c) cut to fit", fitted), "tau2": ("(b) tau2-bench", tau2),
            "apb": ("(a) AgentProcessBench", apb)}
    medians = {key: compare(name, scorers, model, tokenizer, traces, audience, device, args.repeats,
                            tolerance)
               for key, (name, traces) in sets.items()}
    memory_name, memory = peak_memory_gib(device)
    print(f"{memory_name}: {memory:.2f}")
    print(f"fit_ratio: {medians['fit']['naive'] / medians['fit'][ours]:.2f}")
    print(f"tau2_ratio: {medians['tau2']['naive'] / medians['tau2'][ours]:.2f}")
    print(f"ratio: {medians['apb']['naive'] / medians['apb'][ours]:.2f}")


if __name__ == "__main__":
    main()
