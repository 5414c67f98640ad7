"""One call runs a worker job wherever ``RM_COMPUTE`` says; the checkpoint ends in the object store.

Every compute implements ``Compute.run(context, job_dir, objects, ...)`` (as Dagster's own Pipes
clients share one ``run``): ``compute.local.LocalCompute`` (a subprocess) and
``compute.modal.ModalCompute`` (the Modal function); tests swap in one that runs the worker in their
own process. All leave the same files in the job directory (metrics.json, scores.jsonl,
action_scores.jsonl, losses.json, worker.log, upload.json), so what reads the results never asks
where the worker ran. The upload and its record are ``compute.upload``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from stash_pipeline.compute.job import UPLOAD
from stash_pipeline.compute.upload import record_upload, upload_checkpoint, uploaded_checkpoint

__all__ = ["UPLOAD", "Compute", "ComputeTarget", "record_upload", "run_job", "run_worker_job",
           "upload_checkpoint", "uploaded_checkpoint"]

Results = TypeVar("Results")


class Compute(Protocol):
    def run(self, context: Any, job_dir: Path, objects: Any, *, upload_key: str | None = None,
            checkpoint_uri: str | None = None) -> str | None:
        """Run the job written in ``job_dir`` (WorkerFailed names why it failed). A scoring-only
        job names ``checkpoint_uri``, fetched into the job first; with ``upload_key`` the archive
        is uploaded there and its URI returned."""
        ...


ComputeTarget = Compute  # the name ComputeResource.target() is annotated with


def run_worker_job(context: Any, target: Compute, job_dir: Path, objects: Any, *,
                   upload_key: str | None = None, checkpoint_uri: str | None = None) -> str | None:
    """``target.run(...)``: the job in ``job_dir`` on that compute."""
    return target.run(context, job_dir, objects, upload_key=upload_key,
                      checkpoint_uri=checkpoint_uri)


def run_job(job_dir: Path, write: Callable[[Path], Any], run: Callable[[Path], Any],
            read: Callable[[Path], Results]) -> Results:
    """A worker job's one life, the same for every caller (training, Score again, benchmark
    rewards, auto-scoring): ``write`` its inputs (``compute.job.write_job``, the only clearing of
    a job directory), ``run`` it (``run_worker_job`` bound to a step), ``read`` what it left."""
    write(job_dir)
    run(job_dir)
    return read(job_dir)
