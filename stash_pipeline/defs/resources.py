"""The pipeline's resources: the SQL store, the object store, compute and extraction.

Every value comes from the environment (DESIGN §9) when the resource is used, not when the code
location loads, so secrets never appear in the UI's resource config.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

import dagster as dg

from stash_pipeline.compute.local import LocalCompute
from stash_pipeline.compute.remote import MODAL_APP, MODAL_FUNCTION
from stash_pipeline.compute.resident import RESIDENT_ENV
from stash_pipeline.compute.run import ComputeTarget, run_worker_job
from stash_pipeline.core.home import absolute, stash_home
from stash_pipeline.core.requests import local_model_path
from stash_pipeline.core.training_settings import DEFAULT_BASE_MODEL
from stash_pipeline.core.validation import positive_setting
from stash_pipeline.extraction.config import ExtractionConfig
from stash_pipeline.store import Store
from stash_pipeline.store.engine import database_url_from_env

COMPUTE_KINDS = ("local", "modal")
# Traces the first background scoring run covers, before any was measured (defs.scoring.chunks
# then sizes chunks to STASH_CHUNK_SECONDS of work): enough to amortise starting the worker and
# loading the checkpoint, few enough that a person's request waits for one such run at most.
DEFAULT_SCORING_BATCH = 50


class StoreResource(dg.ConfigurableResource):
    """``DATABASE_URL``, else SQLite under ``STASH_HOME``."""

    database_url: str | None = None

    @cached_property
    def store(self) -> Store:
        store = Store(self.database_url or database_url_from_env())
        store.migrate()
        return store


class ObjectStoreResource(dg.ConfigurableResource):
    """S3 when ``S3_BUCKET`` is set (``S3_ENDPOINT``, ``S3_ACCESS_KEY``, ...), else
    ``STASH_HOME``."""

    @cached_property
    def objects(self):  # the objects package's ObjectStore
        from stash_pipeline.objects import object_store_from_env

        return object_store_from_env()


class ComputeResource(dg.ConfigurableResource):
    """Where the worker runs: ``RM_COMPUTE`` (local | modal), ``RM_WORKER_PYTHON``,
    ``RM_ARTIFACT_DIR`` (scratch for job directories), ``RM_RESIDENT_WORKER`` (the resident
    worker's socket, for local scoring jobs)."""

    compute: str | None = None
    worker_python: str | None = None
    artifact_dir: str | None = None
    # Modal's own limit is 20 minutes an invocation; a local worker gets this unless set.
    timeout_s: float | None = None
    resident_worker: str | None = None

    @property
    def kind(self) -> str:
        kind = self.compute or os.environ.get("RM_COMPUTE") or "local"
        if kind not in COMPUTE_KINDS:
            raise ValueError(f"RM_COMPUTE must be one of {', '.join(COMPUTE_KINDS)}, not {kind!r}")
        return kind

    @property
    def python(self) -> str:
        """``RM_WORKER_PYTHON``: a path (``.venv/bin/python``) made absolute here, since the worker
        starts in its job directory; a bare name (``python3``) is looked up on ``PATH``."""
        python = self.worker_python or os.environ.get("RM_WORKER_PYTHON") or sys.executable
        return str(absolute(python)) if os.sep in python else python

    def target(self) -> ComputeTarget:
        """The compute that runs the worker (``compute.run.Compute``)."""
        if self.kind == "modal":
            import modal

            from stash_pipeline.compute.modal import ModalCompute

            return ModalCompute(modal.Function.from_name(MODAL_APP, MODAL_FUNCTION))
        return LocalCompute(self.python, self.timeout_s,
                            self.resident_worker or os.environ.get(RESIDENT_ENV) or None)

    def worker(self, context: dg.AssetExecutionContext, objects: ObjectStoreResource, *,
               upload_key: str | None = None) -> Callable[..., str | None]:
        """How a step runs a worker job on this compute: ``run(job_dir)`` for a training job
        (its archive uploaded to ``upload_key``, the URI returned), ``run(job_dir, checkpoint_uri)``
        for a scoring-only job. Each job directory is recorded in the step's run first
        (``compute.run.run_worker_job``), for the pruning of an abandoned run."""
        def run(job_dir: Path, checkpoint_uri: str | None = None) -> str | None:
            return run_worker_job(context, self.target(), job_dir, objects.objects,
                                  upload_key=upload_key, checkpoint_uri=checkpoint_uri)

        return run

    @property
    def scratch(self) -> Path:
        """``RM_ARTIFACT_DIR``, else ``$STASH_HOME/jobs``: absolute (a relative value is read
        against this process's working directory), created."""
        directory = self.artifact_dir or os.environ.get("RM_ARTIFACT_DIR")
        path = absolute(directory) if directory else stash_home(os.environ) / "jobs"
        path.mkdir(parents=True, exist_ok=True)
        return path


class ExtractionResource(dg.ConfigurableResource):
    """``ANTHROPIC_API_KEY``, ``STASH_EXTRACTION_MODEL``, ``STASH_EXTRACTION``, ..."""

    def config(self) -> ExtractionConfig:
        return ExtractionConfig.from_env()


class SharedEvaluatorResource(dg.ConfigurableResource):
    """The shared evaluator's deployment settings: ``STASH_SHARED_BASE_MODEL`` (the candidates'
    base model, default ``Qwen/Qwen3-0.6B``) and ``STASH_SCORING_BATCH`` (traces a scoring run)."""

    base_model: str | None = None
    scoring_batch: int | None = None

    def default_base_model(self) -> str:
        return local_model_path(self.base_model or os.environ.get("STASH_SHARED_BASE_MODEL")
                                or DEFAULT_BASE_MODEL)

    def batch_size(self) -> int:
        """Traces a background chunk takes: ``fixed_batch_size()``, else DEFAULT_SCORING_BATCH
        (the first chunk's, defs.scoring.chunks sizes the next ones by their speed)."""
        return self.fixed_batch_size() or DEFAULT_SCORING_BATCH

    def fixed_batch_size(self) -> int | None:
        """``STASH_SCORING_BATCH`` when set: every background chunk that many traces."""
        value = self.scoring_batch or os.environ.get("STASH_SCORING_BATCH")
        return positive_setting("STASH_SCORING_BATCH", value) if value else None


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources={
        "database": StoreResource(), "objects": ObjectStoreResource(),
        "compute": ComputeResource(), "extraction": ExtractionResource(),
        "shared_evaluator": SharedEvaluatorResource(),
    })
