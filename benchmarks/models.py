"""The benchmarks' base models, their devices and their measures, shared by every benchmark.

Nothing can be downloaded from the hub here, so a benchmark builds its base model: a causal LM
saved like a real base checkpoint (loading it for classification adds the score head) and a BPE
tokenizer trained on the benchmark's own trace text.

  tiny              4 layers, 256 wide (a few million parameters): the CPU benchmarks
  qwen3-0.6b-shape  Qwen/Qwen3-0.6B's exact config (28 layers, 1024 wide, vocab 151,936; 440M
                    parameters outside the embedding), random weights, stored in bf16 as the real
                    one

Also: the data folder (``--data``, default ../shared/data; docs in benchmarks/README.md), model
FLOPs utilisation against the device's bf16 peak, and peak memory (CUDA's allocator; on CPU the
process's peak resident memory).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from transformers import AutoModelForCausalLM, Qwen3Config

from stash_pipeline.worker.tiny_model import SHAPES, build_tokenizer

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
# The data files the benchmarks read, relative to --data (benchmarks/gpu_prepare.sh copies them).
APB_FILE = Path("agentprocessbench") / "hotpotqa.jsonl"
TAU2_FILE = Path("tau2-bench") / "runs" / "airline_gpt-4o_azure.json"
VOCAB_SIZE = 8192
MODELS = ("tiny", "qwen3-0.6b-shape")
# Dense bf16 peak of each GPU the project meets, TFLOP/s (vendor data sheets, without sparsity).
BF16_PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "A10G": 125.0, "A10": 125.0,
                    "L40S": 362.0, "L4": 121.0}
A10G_TFLOPS, H200_TFLOPS = BF16_PEAK_TFLOPS["A10G"], BF16_PEAK_TFLOPS["H200"]


def config_for(kind: str, vocab_size: int) -> Qwen3Config:
    if kind == "tiny":  # the worker's "small" shape: 4 layers, 256 wide
        return Qwen3Config(vocab_size=vocab_size, max_position_embeddings=2048,
                           tie_word_embeddings=True, **SHAPES["small"])
    if kind == "qwen3-0.6b-shape":
        # Qwen/Qwen3-0.6B's config.json, field for field; the tokenizer's ids fit in its vocab.
        return Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                           num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                           head_dim=128, max_position_embeddings=40960, rope_theta=1000000,
                           rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=151643,
                           eos_token_id=151645)
    raise ValueError(f"unknown model {kind!r}: one of {MODELS}")


def build_base_model(kind: str, directory: Path, texts: list[str],
                     vocab_size: int = VOCAB_SIZE) -> None:
    """Save a base model of ``kind`` and a tokenizer trained on ``texts`` to ``directory``."""
    tokenizer = build_tokenizer(texts, vocab_size)
    tokenizer.save_pretrained(directory)
    config = config_for(kind, len(tokenizer))
    torch.manual_seed(0)
    # Initialised on the GPU where there is one: 0.6B normal draws take a while on a CPU.
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(config)
    if kind != "tiny":
        model.to(torch.bfloat16)  # stored as the real checkpoint is
    model.save_pretrained(directory)


def corpus_texts(data: Path) -> list[str]:
    """What the benchmarks' tokenizer is trained on: every message and tool call of both sources."""
    from stash_pipeline.importers import read_path

    traces = [r.trace for r in read_path(data / APB_FILE, format="agentprocessbench")]
    traces += [r.trace for r in read_path(data / TAU2_FILE, format="tau2")]
    texts = [m.content for t in traces for m in t.messages]
    return texts + [json.dumps(c.arguments) for t in traces for m in t.messages
                    for c in m.tool_calls]


def base_model(kind: str, data: Path, cache: Path | None = None) -> Path:
    """The benchmarks' base model of ``kind``: built in ``cache/kind`` once and reused (building
    Qwen3-0.6B's shape takes a while), or in a temporary folder removed at exit without a cache."""
    if cache is None:
        directory = Path(tempfile.mkdtemp(prefix=f"base-{kind}-"))
        import atexit

        atexit.register(shutil.rmtree, directory, True)
    else:
        directory = cache / kind
        if (directory / "model.safetensors").is_file():
            return directory
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    build_base_model(kind, partial, corpus_texts(data), VOCAB_SIZE)
    shutil.rmtree(directory, ignore_errors=True)
    partial.rename(directory)
    return directory


def non_embedding_parameters(model: Any) -> int:
    """Parameters outside the input embedding: the ones every token multiplies (6N FLOPs a
    token)."""
    embedding = model.get_input_embeddings().weight
    return sum(p.numel() for p in model.parameters() if p is not embedding)


def peak_tflops(device: str, override: float | None = None) -> float | None:
    """The device's dense bf16 peak, when known (``--peak-tflops`` sets it for other devices)."""
    if override:
        return override
    if device != "cuda":
        return None
    name = torch.cuda.get_device_name()
    return next((tflops for gpu, tflops in BF16_PEAK_TFLOPS.items() if gpu in name), None)


def mfu(flops: float, seconds: float, device: str, override: float | None = None) -> float | None:
    peak = peak_tflops(device, override)
    return flops / seconds / (peak * 1e12) if peak and seconds > 0 else None


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def reset_peak_memory(device: str) -> None:
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak_memory_gib(device: str) -> tuple[str, float]:
    """(what was measured, GiB): CUDA's allocator peak since the last reset; on CPU the process's
    peak resident memory since it started (it cannot be reset)."""
    if device == "cuda":
        return "peak_gpu_memory_gib", torch.cuda.max_memory_allocated() / 2**30
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return "peak_rss_gib", kib / 2**20


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cpu, cuda or mps (default: cuda when there is one)")
    parser.add_argument("--model", choices=MODELS, default="tiny")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="the shared data folder, or the copy benchmarks/gpu_prepare.sh makes")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the device's dense bf16 peak, for MFU where it is not known")
    parser.add_argument("--cache", type=Path, default=None,
                        help="keep the built base models here and reuse them (default: build each "
                             "time)")


def describe_device(device: str) -> str:
    if device == "cuda":
        return f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    return (f"{device}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
            f"python {sys.version.split()[0]}")


def switched(module: Any, name: str, value: Any) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """A decorator: the function runs with ``module.name`` set to ``value`` (a switch such as
    ``decoder.FAST_DECODER``), restored afterwards."""
    def wrap(run: Callable[..., T]) -> Callable[..., T]:
        def with_switch(*args: Any) -> T:
            before = getattr(module, name)
            setattr(module, name, value)
            try:
                return run(*args)
            finally:
                setattr(module, name, before)
        return with_switch
    return wrap
