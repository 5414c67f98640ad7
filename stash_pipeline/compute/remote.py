"""The body of the Modal function (``deploy/modal_app.py``): one worker job inside the GPU
container.

It receives the job's inputs as object-store URIs, runs the worker as ``python -m
stash_pipeline.worker``, uploads the checkpoint straight to S3 and returns only JSON: the exit
status, metrics, scores, losses and the log's tail. The worker's environment is built from an allow
list: storage and model-provider credentials pass, database or queue credentials never do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stash_pipeline.compute.contract import (
    ACTION_SCORES,
    ARCHIVE_NAME,
    CHECKPOINT_INPUT,
    FINISHED,
    LOSSES,
    METRICS,
    PAIR_REWARDS,
    SCORES,
    read_jsonl,
    read_metrics,
)
from stash_pipeline.compute.outcome import StderrTail, WorkerExit
from stash_pipeline.compute.upload import read_upload, upload_checkpoint
from stash_pipeline.compute.worker_log import failure_reason
from stash_pipeline.core.home import absolute

# The seed: "storage and model-provider credentials, but no database, queue, or integration
# credentials". Anything not listed here (DATABASE_URL, REDIS_URL, DAGSTER_PG_*, MODAL_TOKEN_*)
# stays out.
WORKER_ENVIRONMENT = (
    "S3_ENDPOINT", "S3_BUCKET", "S3_ACCESS_KEY", "S3_SECRET_KEY", "S3_REGION",
    "ANTHROPIC_API_KEY", "HF_TOKEN", "HF_HOME", "HF_HUB_OFFLINE",
    "PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "CUDA_VISIBLE_DEVICES",
    "RM_WORKER_PYTHON", "RM_ARTIFACT_DIR",
)
DEFAULT_ARTIFACT_DIR = "/tmp/stash-rm"  # the seed's RM_ARTIFACT_DIR on Modal
# The deployed Modal app and its function: deploy/modal_app.py defines them under these names,
# defs/resources.py looks the function up by them.
MODAL_APP = "stash-reward-worker"
MODAL_FUNCTION = "run_reward_job"


def worker_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {name: environ[name] for name in WORKER_ENVIRONMENT if name in environ}


def run_worker_process(job_dir: Path, env: Mapping[str, str]) -> WorkerExit:
    """``python -m stash_pipeline.worker job_dir`` with exactly ``env``; its exit status and the
    end of its stderr (which reaches the function's log as well)."""
    python = env.get("RM_WORKER_PYTHON") or sys.executable
    process = subprocess.Popen([python, "-m", "stash_pipeline.worker", str(job_dir)],
                               cwd=job_dir, env=dict(env), stderr=subprocess.PIPE)
    stderr = StderrTail(process.stderr).start()
    code = process.wait()
    return WorkerExit(code, stderr=stderr.text())


def run_remote_job(*, inputs: Mapping[str, str], upload_key: str | None = None,
                   checkpoint_uri: str | None = None, pipes_env: Mapping[str, str] | None = None,
                   environ: Mapping[str, str] | None = None, objects: Any = None) -> dict[str, Any]:
    """Run one job; ``inputs`` maps the contract's input file names to object-store URIs."""
    env = worker_environment(os.environ if environ is None else environ)
    if objects is None:
        from stash_pipeline.objects import object_store_from_env

        objects = object_store_from_env(env)
    job_dir = absolute(env.get("RM_ARTIFACT_DIR") or DEFAULT_ARTIFACT_DIR) / uuid.uuid4().hex
    job_dir.mkdir(parents=True)
    for name, uri in inputs.items():
        if "/" in name or name.startswith("."):
            raise ValueError(f"input name {name!r} is not a file name of the job contract")
        objects.get_file(uri, job_dir / name)
    if checkpoint_uri:
        objects.get_file(checkpoint_uri, job_dir / CHECKPOINT_INPUT)
    done = run_worker_process(job_dir, {**env, **(pipes_env or {})})
    code = done.code
    result: dict[str, Any] = {"exit_code": code,
                              "log_tail": failure_reason(job_dir, code, stderr=done.stderr)}
    if code != 0 or not (job_dir / METRICS).is_file():
        return result
    if upload_key and (job_dir / ARCHIVE_NAME).is_file():
        result["checkpoint_uri"] = upload_checkpoint(objects, job_dir, upload_key)
        result["upload_seconds"] = read_upload(job_dir)["seconds"]  # counted in metrics.json
        result["log_tail"] = failure_reason(job_dir, code)
    metrics = read_metrics(job_dir)
    losses = job_dir / LOSSES
    result.update(metrics=metrics, scores=read_jsonl(job_dir / SCORES),
                  action_scores=read_jsonl(job_dir / ACTION_SCORES)
                  if (job_dir / ACTION_SCORES).is_file() else None,
                  pair_rewards=read_jsonl(job_dir / PAIR_REWARDS)
                  if (job_dir / PAIR_REWARDS).is_file() else None,
                  finished_traces=read_jsonl(job_dir / FINISHED)
                  if (job_dir / FINISHED).is_file() else None,
                  losses=json.loads(losses.read_text()) if losses.is_file() else None)
    return result
