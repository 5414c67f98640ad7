"""One call runs a worker job wherever ``RM_COMPUTE`` says; the checkpoint ends in the object store.

Every compute implements ``Compute.run(context, job_dir, objects, ...)`` (as Dagster's own Pipes
clients share one ``run``): ``compute.local.LocalCompute`` (a subprocess) and
``compute.modal.ModalCompute`` (the Modal function); tests swap in one that runs the worker in their
own process. All leave the same files in the job directory (metrics.json, scores.jsonl,
action_scores.jsonl, losses.json, worker.log, upload.json), so what reads the results never asks
where the worker ran. The upload and its record are ``compute.upload``'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from stash_pipeline.compute.contract import UPLOAD
from stash_pipeline.compute.upload import record_upload, upload_checkpoint, uploaded_checkpoint

__all__ = ["JOB_DIRS_TAG", "UPLOAD", "Compute", "ComputeTarget", "job_dirs_of", "record_job_dir",
           "record_upload", "run_job", "run_worker_job", "upload_checkpoint",
           "uploaded_checkpoint"]

Results = TypeVar("Results")


class Compute(Protocol):
    def run(self, context: Any, job_dir: Path, objects: Any, *, upload_key: str | None = None,
            checkpoint_uri: str | None = None) -> str | None:
        """Run the job written in ``job_dir`` (WorkerFailed names why it failed). A scoring-only
        job names ``checkpoint_uri``, fetched into the job first; with ``upload_key`` the archive
        is uploaded there and its URI returned."""
        ...


ComputeTarget = Compute  # the name ComputeResource.target() is annotated with


# The job directories a run's worker jobs used, as a JSON list: what is pruned of a run whose
# launching process died (defs.abandoned_runs), which no step of its own cleaned up.
JOB_DIRS_TAG = "stash/job_dirs"


def run_worker_job(context: Any, target: Compute, job_dir: Path, objects: Any, *,
                   upload_key: str | None = None, checkpoint_uri: str | None = None) -> str | None:
    """``target.run(...)``: the job in ``job_dir`` on that compute, recorded in the run's
    ``JOB_DIRS_TAG`` first."""
    record_job_dir(context, job_dir)
    return target.run(context, job_dir, objects, upload_key=upload_key,
                      checkpoint_uri=checkpoint_uri)


def record_job_dir(context: Any, job_dir: Path) -> None:
    """Add ``job_dir`` to its run's ``JOB_DIRS_TAG`` (the steps of a run that run workers follow
    one another, so the read and the write do not race)."""
    run_id = context.run.run_id
    run = context.instance.get_run_by_id(run_id)
    known = job_dirs_of(run.tags if run is not None else {})
    if job_dir not in known:
        context.instance.add_run_tags(run_id, {
            JOB_DIRS_TAG: json.dumps([str(path) for path in (*known, job_dir)])})


def job_dirs_of(tags: Mapping[str, str]) -> list[Path]:
    """The job directories a run's tags record (``JOB_DIRS_TAG``)."""
    return [Path(path) for path in json.loads(tags.get(JOB_DIRS_TAG) or "[]")]


def run_job(job_dir: Path, write: Callable[[Path], Any], run: Callable[[Path], Any],
            read: Callable[[Path], Results], *,
            finished: Callable[[Path], None] | None = None) -> Results:
    """A worker job's one life, the same for every caller (training, Score again, benchmark
    rewards, auto-scoring): ``write`` its inputs (``contract.write_job``, the only clearing of
    a job directory), ``run`` it (``run_worker_job`` bound to a step), ``read`` what it left.

    ``finished`` (``compute.contract.remove_job`` or ``keep_only_logs``) then prunes the directory,
    whether the job succeeded or failed: ``read`` must take everything the caller needs. None
    leaves it to the caller (a personal attempt, whose next step stores its results).
    """
    try:
        write(job_dir)
        run(job_dir)
        return read(job_dir)
    finally:
        if finished is not None:
            finished(job_dir)
