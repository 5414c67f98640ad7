"""The whole worker job, as the pipeline runs it, phase by phase (issue 11, aim 3).

Builds the base model (``--model``), every AgentProcessBench feedback pair (personal) split by the
project's one split, writes the job with the contract's ``write_job`` (all 250 traces to score),
runs ``python -m stash_pipeline.worker JOB_DIR`` as a subprocess (``--device cpu`` hides any GPU
from it), then stands in for the caller's upload with a local copy of the archive, logged as the
``upload`` phase. Prints every phase's seconds from worker.log, the process's wall time and what
the phases leave out (interpreter start, imports).

On a GPU it also prints the seed's budget as a figure, ``a10g_minutes_estimate: N``: the default
job (4000 pairs of this run's mean length, one epoch, then scoring 1,000 traces with their
actions) on an A10G, from this run's rates: the GPU-bound phases (training, evaluation, scoring)
scaled by the two GPUs' dense bf16 peaks (the A10G's 125 TFLOP/s against this GPU's, both printed
as ``assumed_*``), that is at the MFU measured here; the others as measured. The training FLOPs it
implies (6 x non-embedding parameters x tokens, attention left out) are printed too. Last line
``job_over_compute: N``: the worker's wall time over its training plus scoring time (the aim: at
most 1.3). ``--max-pairs`` and ``--traces`` size a run to a time budget.

Scoring (issue 18) is also given per 1,000 actions: the job's scoring phase (whole traces and every
action of the 250 traces, whole traces riding along in the actions' forwards) beside the naive
scorer, one forward per action over its own rendering (``action_scoring.naive_scores``), timed
here on a seed-0 sample of ``--naive-traces`` traces with the job's own checkpoint, in fp32:
``scoring_s_per_1000_actions``, ``naive_s_per_1000_actions`` and ``naive_over_scoring``.

    .venv/bin/python benchmarks/worker_job.py [--device cuda] [--model qwen3-0.6b-shape] [--data
    DIR]
        [--max-pairs N] [--traces N] [--naive-traces N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stash_pipeline.compute.contract import (
    ARCHIVE_NAME,
    CHECKPOINT_DIR,
    JobSettings,
    read_metrics,
    write_job,
)
from stash_pipeline.compute.worker_log import LOG, failure_reason, logged_phase, phase_seconds
from stash_pipeline.core.pair_builders import build_feedback_pairs
from stash_pipeline.core.split import split_pairs
from stash_pipeline.core.training_settings import DEFAULT_MAX_PAIRS
from stash_pipeline.importers import read_path

from models import (
    A10G_TFLOPS,
    APB_FILE,
    REPO,
    add_common_arguments,
    base_model,
    describe_device,
    peak_tflops,
)

DEFAULT_JOB_TRACES = 1_000  # issue 42's budget figure: traces a default job scores
GPU_BOUND = ("training", "evaluation", "scoring")


def a10g_minutes(phases: dict[str, float], *, train_pairs: int, all_pairs: int, traces: int,
                 speedup: float, startup: float) -> tuple[float, dict[str, float]]:
    """Minutes of the default job on an A10G, and each part's seconds there."""
    parts = {
        "training": phases["training"] * DEFAULT_MAX_PAIRS / train_pairs * speedup,
        # Evaluation reads every training pair (the reward stats) and the held-out ones.
        "evaluation": phases.get("evaluation", 0.0) * DEFAULT_MAX_PAIRS / train_pairs * speedup,
        "scoring": phases["scoring"] * DEFAULT_JOB_TRACES / traces * speedup,
        # Rendering and tokenising run on the host's CPU: they grow with the inputs, not the GPU.
        "inputs": phases.get("inputs", 0.0) * (DEFAULT_MAX_PAIRS + DEFAULT_JOB_TRACES) / (all_pairs
                                                                                          + traces),
        "fixed": sum(phases.get(name, 0.0) for name in ("load", "save", "archive", "upload"))
        + startup,
    }
    return sum(parts.values()) / 60, parts


def training_size(base: Path, pairs: list) -> tuple[int, int]:
    """Non-embedding parameters of the base model and the tokens of ``pairs`` (both sides), as
    the worker renders and truncates them."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from stash_pipeline.worker.modeling import load_config, load_tokenizer, tokenize
    from stash_pipeline.worker.render import render_side

    config = load_config(str(base))
    config.num_labels = 1
    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(config)
    embedding = model.get_input_embeddings().weight
    parameters = sum(p.numel() for p in model.parameters() if p is not embedding)
    tokenizer = load_tokenizer(str(base))
    sides = [render_side(tokenizer, side, "personal") for p in pairs
             for side in (p.chosen, p.rejected)]
    return parameters, sum(len(ids) for ids in tokenize(tokenizer, sides))


def naive_seconds_per_action(checkpoint: Path, traces: list, device: str, count: int) -> float:
    """Seconds per action of the naive scorer on a seed-0 sample, with the job's checkpoint."""
    import random

    from stash_pipeline.worker.checkpoint import open_checkpoint

    from action_scoring import naive_scores

    with open_checkpoint(checkpoint) as saved:
        model, tokenizer = saved.load_model(device=device)
    sample = random.Random(0).sample(traces, min(count, len(traces)))
    started = time.perf_counter()
    scores = naive_scores(model, tokenizer, sample, saved.audience, device)
    return (time.perf_counter() - started) / max(len(scores), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--max-pairs", type=int, default=None, help="cap the pairs (a quick run)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the job directory here")
    parser.add_argument("--traces", type=int, default=None,
                        help="score only the first N traces (a quick run)")
    parser.add_argument("--naive-traces", type=int, default=20,
                        help="traces the naive per-action scorer is timed on")
    args = parser.parse_args()
    # A time limit's SIGTERM ends the worker too (subprocess.run kills its child on an exception).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    scratch = Path(tempfile.mkdtemp(prefix="worker-job-"))
    try:
        items = list(read_path(args.data / APB_FILE, format="agentprocessbench"))
        traces = [item.trace for item in items]
        pairs = build_feedback_pairs(traces, [f for item in items for f in item.feedback],
                                     "personal")
        if args.traces:
            traces = traces[: args.traces]
        if args.max_pairs:
            pairs = pairs[: args.max_pairs]
        split = split_pairs(pairs)
        started = time.perf_counter()
        base = base_model(args.model, args.data, args.cache)
        print(f"model {args.model} ready in {time.perf_counter() - started:.0f} s; device "
              f"{describe_device(args.device)}")
        job_dir = args.keep or scratch / "job"
        write_job(job_dir, JobSettings(evaluator="benchmark", base_model=str(base),
                                       excluded_cross_trace_pairs=split.excluded_cross_trace_pairs),
                  train_pairs=split.train, eval_pairs=split.eval, score_traces=traces)
        print(f"{len(split.train)} training pairs, {len(split.eval)} held out, {len(traces)} "
              "traces to score")
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        if args.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "stash_pipeline.worker", str(job_dir)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit("the worker failed "
                             f"({done.returncode}):\n{failure_reason(job_dir, done.returncode)}")
        metrics = read_metrics(job_dir)
        with logged_phase(job_dir, "upload"):  # the caller's upload, here a copy to a local store
            shutil.copyfile(job_dir / ARCHIVE_NAME, scratch / "uploaded.tar.gz")
        phases = phase_seconds((job_dir / LOG).read_text())
        archive_mib = (job_dir / ARCHIVE_NAME).stat().st_size / 2**20
        weights_mib = (job_dir / CHECKPOINT_DIR / "model.safetensors").stat().st_size / 2**20
        print(f"device {metrics['device']}; final loss {metrics['final_loss']:.4f}; eval accuracy "
              f"{metrics['eval_accuracy']}; model.safetensors {weights_mib:.0f} MiB, archive "
              f"{archive_mib:.0f} MiB")
        for name, seconds in phases.items():
            print(f"{name}_seconds: {seconds:.2f}")
        startup = wall - metrics["seconds"]
        print(f"worker_wall_seconds: {wall:.2f} (phases "
              f"{sum(v for k, v in phases.items() if k != 'upload'):.2f}, interpreter start and "
              f"imports {startup:.2f})")
        print(f"training_pairs_per_s: {len(split.train) / phases['training']:.2f}")
        print(f"scoring_traces_per_s: {len(traces) / phases['scoring']:.2f}")
        actions = sum(len(t.actions()) for t in traces)
        naive = naive_seconds_per_action(job_dir / CHECKPOINT_DIR, traces, args.device,
                                         args.naive_traces)
        ours = phases["scoring"] / actions
        print(f"scoring_s_per_1000_actions: {1000 * ours:.2f} "
              f"({actions} actions, whole traces too)")
        print(f"naive_s_per_1000_actions: {1000 * naive:.2f}")
        print(f"naive_over_scoring: {naive / ours:.2f}")
        peak = peak_tflops(metrics["device"], args.peak_tflops)
        parameters, tokens = training_size(base, split.train)
        flops = 6 * parameters * tokens / len(split.train) * DEFAULT_MAX_PAIRS
        print(f"assumed_training_flops_{DEFAULT_MAX_PAIRS}_pairs: {flops:.3e} (6 x "
              f"{parameters / 1e6:.0f}M non-embedding parameters x {tokens / len(split.train):.0f}"
              " tokens a pair)")
        print(f"assumed_a10g_peak_tflops: {A10G_TFLOPS:.0f}")
        if peak:
            print(f"assumed_gpu_peak_tflops: {peak:.0f}")
            print(f"training_mfu: {6 * parameters * tokens / phases['training'] / peak / 1e12:.3f}")
        if metrics["device"] == "cuda" and peak:
            minutes, parts = a10g_minutes(phases, train_pairs=len(split.train),
                                          all_pairs=len(pairs), traces=len(traces),
                                          speedup=peak / A10G_TFLOPS, startup=startup)
            print("a10g_seconds_by_part: " + json.dumps({k: round(v, 1) for k, v in parts.items()}))
            print(f"a10g_minutes_estimate: {minutes:.1f}")
        compute_s = phases["training"] + phases["scoring"]
        print(f"job_over_compute: {(wall + phases.get('upload', 0.0)) / compute_s:.2f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
