"""Auto-scoring actions/s on the CPU through the real scoring path, against its forwards alone.

The path is Score again's and auto-scoring's (``pipelines.trace_scoring.score``): the traces are
read from the store (SQLite), written into a job directory (``contract.write_job``), scored by
the worker's own ``main`` (``worker.runner``: the settings, the dataset, the checkpoint's load, the
rendering and tokenising, the forwards, the JSON Lines written), read back (``read_results``) and
stored (``Store.replace_scores``). The worker runs in this process (as the tests' in-process
compute): a real job adds one interpreter start and its imports, a few seconds a job whatever its
size. The baseline is the same forwards alone: the rows the scorer plans for these traces
(``scoring.plan_trace_rows``), read by ``batching.read_rows`` with the checkpoint's model loaded
once. ``overhead`` is the path's median over the forwards' median: what the path spends beyond
the forwards is (overhead - 1) x the forwards.

Traces: real tau2-bench airline simulations (``--runs`` of the airline result files, 50 each), a
personal model's audience (no system turn). Models, both built here from a config with random
weights (nothing downloaded):

  tiny    the tests' tiny Qwen3 (stash_pipeline_tests/tiny_models.py: 2 layers, 64 wide, a BPE
          vocabulary of 1,024 learnt from the traces), the window 1,024 tokens
  minilm  sentence-transformers/all-MiniLM-L6-v2's config (BERT, 6 layers, 384 wide, 12 heads,
          512 positions: the window is 512) with a WordPiece tokenizer learnt from the traces

Usage: .venv/bin/python benchmarks/cpu_scoring.py [--models tiny,minilm] [--traces N]
    [--minilm-traces N] [--repeats R] [--profile N] [--threads T] [--data DIR]
(docs/worker.md's figures: ``--threads 1``, one torch thread, so that CPU seconds count work.)
Prints per model each repeat, then medians with their range, and last ``actions_per_s: N`` (the
tiny model's path). ``--profile N`` prints cProfile's N most costly functions of one path run.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import BertConfig, BertModel
from transformers.utils import logging as transformers_logging

from stash_pipeline.compute.contract import CHECKPOINT_INPUT
from stash_pipeline.core.calibration import RewardStats
from stash_pipeline.core.requests import RewardModelRequest
from stash_pipeline.importers import read_path
from stash_pipeline.pipelines import trace_scoring
from stash_pipeline.store import Store
from stash_pipeline.worker import tiny_model
from stash_pipeline.worker.batching import read_rows
from stash_pipeline.worker.checkpoint import archive, open_checkpoint, writing_checkpoint
from stash_pipeline.worker.modeling import load_reward_model, load_tokenizer, scoring_precision
from stash_pipeline.worker.readout import pools_last_token
from stash_pipeline.worker.runner import main as run_worker
from stash_pipeline.worker.scoring import TracePlan, plan_trace_rows

from models import DEFAULT_DATA, describe_device

OWNER = "bench"
AUDIENCE = "personal"
# sentence-transformers/all-MiniLM-L6-v2's config.json (BertModel), field for field.
MINILM = {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
          "intermediate_size": 1536, "max_position_embeddings": 512, "type_vocab_size": 2,
          "hidden_act": "gelu", "layer_norm_eps": 1e-12}
MINILM_VOCAB = 30522


def airline_files(data: Path, runs: int) -> list[Path]:
    return sorted((data / "tau2-bench" / "runs").glob("airline_*.json"))[:runs]


def corpus(files: list[Path]) -> list[str]:
    """Message contents and call arguments of the traces: what the tokenizers learn."""
    texts = []
    for file in files:
        for record in read_path(file, format="tau2"):
            for message in record.trace.messages:
                texts.append(message.content)
                texts.extend(json.dumps(c.arguments) for c in message.tool_calls)
    return texts


def build_tiny(directory: Path, texts: list[str]) -> None:
    tiny_model.save_tiny_base_model(directory, texts, shape="tiny", context=2048)


def build_minilm(directory: Path, texts: list[str]) -> None:
    tiny_model.build_wordpiece_tokenizer(texts, MINILM_VOCAB).save_pretrained(directory)
    torch.manual_seed(0)
    # The real vocabulary's size (the learnt one is smaller): the embedding is MiniLM's.
    BertModel(BertConfig(vocab_size=MINILM_VOCAB, **MINILM)).save_pretrained(directory)


BUILDERS: dict[str, Callable[[Path, list[str]], None]] = {"tiny": build_tiny,
                                                          "minilm": build_minilm}


def checkpoint_archive(base: Path, directory: Path) -> Path:
    """``reward-model.tar.gz`` of ``base`` with a score head drawn from N(0, 1) and action
    stats, written by the training job's own writer (as a trained personal model's)."""
    tokenizer = load_tokenizer(str(base))
    model = load_reward_model(str(base), device="cpu", tokenizer=tokenizer)
    torch.manual_seed(2)
    head = model.score if hasattr(model, "score") else model.classifier  # BERT's is classifier
    with torch.no_grad():
        head.weight.normal_(0.0, 1.0)
    with writing_checkpoint(directory / "reward-model") as checkpoint:
        checkpoint.save_model(model, tokenizer)
        checkpoint.finish(evaluator="bench", audience=AUDIENCE, base_model=str(base), metrics={},
                          reward_stats=RewardStats(mean=0.25, std=2.0, count=8),
                          action_reward_stats=RewardStats(mean=-0.5, std=0.5, count=6))
    return archive(directory / "reward-model", directory / "reward-model.tar.gz")


def personal_model(store: Store, archive_path: Path, trace_ids: list[str]) -> str:
    """A succeeded personal model whose checkpoint is ``archive_path`` (its URI: a local path)."""
    model = store.create_reward_model(OWNER, RewardModelRequest("bench", tuple(trace_ids[:2])))
    store.mark_running(model.id)
    store.mark_succeeded(model.id, checkpoint_uri=str(archive_path),
                         metrics={"action_scoring_version": 1})
    return model.id


def run_in_process(job_dir: Path, uri: str) -> None:
    """The compute's part: the checkpoint fetched into the job, the worker's ``main`` run."""
    shutil.copyfile(uri, job_dir / CHECKPOINT_INPUT)
    if run_worker(str(job_dir)) != 0:
        raise SystemExit((job_dir / "worker.log").read_text()[-3000:])


class Bench:
    def __init__(self, name: str, folder: Path, texts: list[str], store: Store,
                 versions: dict[str, int]):
        self.name, self.store, self.versions, self.folder = name, store, versions, folder
        base = folder / f"base-{name}"
        base.mkdir()
        BUILDERS[name](base, texts)
        self.archive = checkpoint_archive(base, folder / f"checkpoint-{name}")
        self.model_id = personal_model(store, self.archive, list(versions))
        self.runs = 0
        with open_checkpoint(self.archive) as saved:
            self.model, self.tokenizer = saved.load_model(device="cpu")
        self.traces = store.get_traces(list(versions))
        plan = self.plan()
        self.rows = plan.rows
        self.actions = plan.action_count
        self.tokens = sum(len(row.ids) for row in plan.rows)

    def path(self) -> dict[str, float]:
        """Score the traces through the real path; the rewards it stored, by action id. The
        worker's phases go to ``self.phases``."""
        self.runs += 1
        results = trace_scoring.score(self.store, self.model_id, self.versions, actions=True,
                                      run=run_in_process, artifact_dir=self.folder / "scratch",
                                      name=f"run-{self.runs}")
        assert len(results.action_scores) == self.actions, "the path scored other actions"
        self.phases = dict(results.metrics["phases"], worker=results.metrics["seconds"])
        return {a.action_id: a.raw for a in results.action_scores}

    def plan(self) -> TracePlan:
        """The rows the path forwards: every rendering and tokenisation of the scoring."""
        return plan_trace_rows(self.tokenizer, self.traces, AUDIENCE, whole=True, actions=True,
                               one_pass=pools_last_token(self.model))

    def forwards(self) -> dict[str, float]:
        with scoring_precision("auto", "cpu"):
            read = read_rows(self.model, self.rows, pad_id=self.tokenizer.pad_token_id)
        return {str(k): v for k, v in read.items() if not isinstance(k, tuple)}


def spread(values: list[float]) -> str:
    return (f"median {statistics.median(values):.2f} s (min {min(values):.2f}, "
            f"max {max(values):.2f}, n={len(values)})")


def measure(bench: Bench, repeats: int) -> dict[str, float]:
    """Path and forwards back to back, ``repeats`` times; their rewards compared. Wall seconds
    (the figures) and this process's CPU seconds (less sensitive to a shared machine's load)."""
    runs = {"path": bench.path, "planning": bench.plan, "forwards": bench.forwards}
    times: dict[str, list[float]] = {label: [] for label in runs}
    cpu: dict[str, list[float]] = {label: [] for label in runs}
    for repeat in range(repeats):
        for label, run in runs.items():  # back to back: a shared machine's speed drifts
            started, started_cpu = time.perf_counter(), time.process_time()
            rewards = run()
            times[label].append(time.perf_counter() - started)
            cpu[label].append(time.process_time() - started_cpu)
            if label == "path":
                path_rewards = rewards
            elif label == "forwards":
                worst = max(abs(path_rewards[k] - rewards[k]) for k in rewards)
        phases = ", ".join(f"{k} {v:.2f}" for k, v in bench.phases.items())
        print(f"{bench.name} repeat {repeat + 1}: path {times['path'][-1]:.2f} s "
              f"(CPU {cpu['path'][-1]:.2f} s; worker phases: {phases}), planning "
              f"{times['planning'][-1]:.2f} s, forwards {times['forwards'][-1]:.2f} s (CPU "
              f"{cpu['forwards'][-1]:.2f} s); largest reward difference {worst:.1e}, load "
              f"average {os.getloadavg()[0]:.2f}", flush=True)
    path, forwards = (statistics.median(times[k]) for k in ("path", "forwards"))
    print(f"{bench.name}: {len(bench.versions)} traces, {bench.actions} actions, "
          f"{len(bench.rows)} rows of {bench.tokens} tokens, window "
          f"{bench.tokenizer.model_max_length}")
    print(f"{bench.name}: path {spread(times['path'])}: {bench.actions / path:.1f} actions/s")
    print(f"{bench.name}: forwards alone {spread(times['forwards'])}: "
          f"{bench.actions / forwards:.1f} actions/s")
    print(f"{bench.name}: rendering and tokenising (the plan) alone {spread(times['planning'])}")
    print(f"{bench.name}: CPU seconds: path {spread(cpu['path'])}, forwards "
          f"{spread(cpu['forwards'])}")
    print(f"{bench.name}: overhead {path / forwards:.2f} (path over forwards; range "
          f"{min(times['path']) / max(times['forwards']):.2f}-"
          f"{max(times['path']) / min(times['forwards']):.2f})", flush=True)
    return {"actions_per_s": bench.actions / path,
            "forward_actions_per_s": bench.actions / forwards, "overhead": path / forwards,
            "planning_share": statistics.median(times["planning"]) / path}


def profile(bench: Bench, top: int) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    bench.path()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--models", default="tiny,minilm")
    parser.add_argument("--runs", type=int, default=10, help="airline result files read (20-50 "
                        "traces each)")
    parser.add_argument("--traces", type=int, default=60, help="traces the tiny model scores")
    parser.add_argument("--minilm-traces", type=int, default=6,
                        help="traces MiniLM scores (the first of the tiny model's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--profile", type=int, default=0, help="print the N most costly "
                        "functions of one path run")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    import datasets

    datasets.disable_progress_bars()
    files = airline_files(args.data, args.runs)
    with tempfile.TemporaryDirectory(prefix="cpu-scoring-") as folder:
        root = Path(folder)
        store = Store(f"sqlite:///{root / 'stash.db'}")
        store.migrate()
        store.create_account(OWNER)
        records = [r for f in files for r in read_path(f, format="tau2", owner=OWNER)]
        count = max(args.traces, args.minilm_traces)
        store.import_traces(records[:count])
        versions = {r.trace.id: r.trace.version for r in records[:count]}
        texts = corpus(files)
        print(f"{len(versions)} airline traces from {len(files)} tau2-bench runs, device "
              f"{describe_device('cpu')}, load average {os.getloadavg()[0]:.2f}", flush=True)
        results = {}
        for name in args.models.split(","):
            count = args.traces if name == "tiny" else args.minilm_traces
            bench = Bench(name, root, texts, store, dict(list(versions.items())[:count]))
            bench.path()  # warm-up: imports, first allocations
            if args.profile:
                profile(bench, args.profile)
            results[name] = measure(bench, args.repeats)
        store.dispose()
    for name, figures in results.items():
        if name != "tiny":
            for key, value in figures.items():
                print(f"{name}_{key}: {value:.2f}")
    if "tiny" in results:
        print(f"tiny_planning_share: {results['tiny']['planning_share']:.2f}")
        print(f"tiny_overhead: {results['tiny']['overhead']:.2f}")
        print(f"tiny_forward_actions_per_s: {results['tiny']['forward_actions_per_s']:.1f}")
        print(f"actions_per_s: {results['tiny']['actions_per_s']:.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
