"""The checkpoint's upload to the object store and its record, ``upload.json``: one step, whether
the worker ran here (``compute.local``) or in the Modal function (``compute.remote``). And the
hand-over of a training job's results beside the checkpoint, which a later step reads back in
whatever task it runs (never from the job directory of the step that ran the worker).

Torch- and Dagster-free, like the job contract it extends: the Modal function's body uses it too.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from stash_pipeline.compute.contract import (
    ACTION_SCORES,
    ARCHIVE_NAME,
    METRICS,
    SCORES,
    SETTINGS,
    UPLOAD,
    atomic_path,
)
from stash_pipeline.compute.worker_log import logged_phase
from stash_pipeline.objects.errors import ObjectNotFoundError
from stash_pipeline.objects.keys import result_key

# What a later step reads of a finished training job. metrics.json last: as in the job directory,
# it is the success mark, and settings.json names the attempt it must belong to.
HANDED_OVER = (SETTINGS, SCORES, ACTION_SCORES, METRICS)


def upload_checkpoint(objects: Any, job_dir: Path, key: str) -> str:
    """Put the archive in the object store under ``key``; its time joins the metrics' ``seconds``
    (the seed) and ``upload.json`` records where it went."""
    started = time.perf_counter()
    with logged_phase(job_dir, "upload"):
        uri = objects.put_file(key, job_dir / ARCHIVE_NAME)
    record_upload(job_dir, uri, time.perf_counter() - started)
    return uri


def record_upload(job_dir: Path, uri: str, seconds: float, *, counted: bool = False) -> None:
    """upload.json; unless already ``counted`` (the Modal function's metrics come back with it),
    the upload's seconds are added to metrics.json."""
    if not counted:
        metrics_path = job_dir / METRICS
        metrics = json.loads(metrics_path.read_text())
        metrics["seconds"] = metrics.get("seconds", 0.0) + seconds
        with atomic_path(metrics_path) as partial:
            partial.write_text(json.dumps(metrics, indent=2))
    (job_dir / UPLOAD).write_text(json.dumps({"uri": uri, "seconds": seconds}))


def read_upload(job_dir: Path) -> dict[str, Any]:
    """upload.json: {"uri": ..., "seconds": ...}."""
    return json.loads((job_dir / UPLOAD).read_text())


def uploaded_checkpoint(job_dir: Path) -> str:
    """The URI the job's checkpoint was uploaded to."""
    return read_upload(job_dir)["uri"]


def hand_over_results(objects: Any, job_dir: Path, checkpoint_key: str) -> None:
    """The job's results (``HANDED_OVER``) beside its checkpoint (``objects.keys.result_key``).
    A file this job did not write is deleted there: an earlier upload under the same key is never
    read as this job's."""
    for name in HANDED_OVER:
        key = result_key(checkpoint_key, name)
        if (job_dir / name).is_file():
            objects.put_file(key, job_dir / name)
        else:
            objects.delete(objects.uri_for(key))


def fetch_results(objects: Any, checkpoint_key: str, into: Path) -> Path:
    """The handed-over results of the job that trained ``checkpoint_key``, as files in ``into``
    (a job directory's names, so ``compute.contract``'s readers read them); ObjectNotFoundError that
    names the key when that job handed over none."""
    for name in HANDED_OVER:
        uri = objects.uri_for(result_key(checkpoint_key, name))
        if name in (SETTINGS, METRICS) and not objects.exists(uri):
            raise ObjectNotFoundError(
                f"{uri}: the training job of {checkpoint_key} handed over no {name} (its step "
                "has not succeeded, or its results were discarded)")
        if objects.exists(uri):
            objects.get_file(uri, into / name)
    return into


def discard_results(objects: Any, checkpoint_key: str) -> None:
    """The handed-over results go (their rows are in the store, or the attempt failed)."""
    for name in HANDED_OVER:
        objects.delete(objects.uri_for(result_key(checkpoint_key, name)))
