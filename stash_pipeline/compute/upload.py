"""The checkpoint's upload to the object store and its record, ``upload.json``: one step, whether
the worker ran here (``compute.local``) or in the Modal function (``compute.remote``).

Torch- and Dagster-free, like the job contract it extends: the Modal function's body uses it too.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from stash_pipeline.compute.job import ARCHIVE_NAME, METRICS, UPLOAD, atomic_path, logged_phase


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
