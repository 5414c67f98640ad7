"""One call runs a worker job wherever ``RM_COMPUTE`` says; the checkpoint ends in the object store.

Both paths leave the same files in the job directory (metrics.json, scores.jsonl,
action_scores.jsonl, losses.json, worker.log, upload.json), so what reads the results never asks
where the worker ran.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stash_pipeline.compute.job import (
    ARCHIVE_NAME, CHECKPOINT_INPUT, METRICS, atomic_path, logged_phase,
)
from stash_pipeline.compute.local import run_local_worker
from stash_pipeline.compute.outcome import check_worker_exit

UPLOAD = "upload.json"  # {"uri": ..., "seconds": ...} once the checkpoint is in the object store


@dataclass(frozen=True)
class ComputeTarget:
    kind: str  # "local" or "modal"
    python: str  # the worker's interpreter (local)
    timeout_s: float | None = None
    modal_function: Any = None  # the deployed Modal function (modal)


def run_worker_job(context: Any, target: ComputeTarget, job_dir: Path, objects: Any, *,
                   upload_key: str | None = None, checkpoint_uri: str | None = None) -> str | None:
    """Run the job in ``job_dir``; WorkerFailed names why it failed. Returns the uploaded
    checkpoint's URI when ``upload_key`` is given. A scoring-only job names ``checkpoint_uri``."""
    if target.kind == "modal":
        from stash_pipeline.compute.modal import run_modal_worker

        return run_modal_worker(context, job_dir, function=target.modal_function, objects=objects,
                                upload_key=upload_key, checkpoint_uri=checkpoint_uri)
    if checkpoint_uri:
        objects.get_file(checkpoint_uri, job_dir / CHECKPOINT_INPUT)
    done = run_local_worker(context, job_dir, python=target.python, timeout_s=target.timeout_s)
    check_worker_exit(job_dir, done)
    return upload_checkpoint(objects, job_dir, upload_key) if upload_key else None


def upload_checkpoint(objects: Any, job_dir: Path, key: str) -> str:
    """Put the archive in the object store; its time joins the metrics' ``seconds`` (the seed)."""
    started = time.perf_counter()
    with logged_phase(job_dir, "upload"):
        uri = objects.put_file(key, job_dir / ARCHIVE_NAME)
    record_upload(job_dir, uri, time.perf_counter() - started)
    return uri


def record_upload(job_dir: Path, uri: str, seconds: float, *, counted: bool = False) -> None:
    """upload.json; unless already ``counted`` (the Modal function does), the upload's seconds
    are added to metrics.json."""
    if not counted:
        metrics_path = job_dir / METRICS
        metrics = json.loads(metrics_path.read_text())
        metrics["seconds"] = metrics.get("seconds", 0.0) + seconds
        with atomic_path(metrics_path) as partial:
            partial.write_text(json.dumps(metrics, indent=2))
    (job_dir / UPLOAD).write_text(json.dumps({"uri": uri, "seconds": seconds}))


def uploaded_checkpoint(job_dir: Path) -> str:
    """The URI the job's checkpoint was uploaded to."""
    return json.loads((job_dir / UPLOAD).read_text())["uri"]
