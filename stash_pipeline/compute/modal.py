"""RM_COMPUTE=modal: the job runs in the Modal function of ``deploy/modal_app.py``, through Pipes.

The inputs go to the object store (S3) and the function reads them there; progress comes back as
Pipes messages through the same bucket (``PipesS3MessageReader``), and the results as the function's
JSON, written into the local job directory exactly as a local worker would have left them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from stash_pipeline.compute.contract import (
    ACTION_SCORES,
    FINISHED,
    INPUT_FILES,
    LOSSES,
    METRICS,
    PAIR_REWARDS,
    SCORES,
)
from stash_pipeline.compute.outcome import WorkerFailed
from stash_pipeline.compute.pipes import s3_message_reader
from stash_pipeline.compute.upload import record_upload
from stash_pipeline.compute.worker_log import LOG

PIPES_POLL_S = 5.0


@dataclass(frozen=True)
class ModalCompute:
    """The worker in the deployed Modal function (``compute.run.Compute``)."""

    function: Any  # modal.Function.from_name(MODAL_APP, MODAL_FUNCTION)

    def run(self, context: Any, job_dir: Path, objects: Any, *, upload_key: str | None = None,
            checkpoint_uri: str | None = None) -> str | None:
        return run_modal_worker(context, job_dir, function=self.function, objects=objects,
                                upload_key=upload_key, checkpoint_uri=checkpoint_uri)


def run_modal_worker(context: Any, job_dir: Path, *, function: Any, objects: Any,
                     upload_key: str | None, checkpoint_uri: str | None) -> str | None:
    if not hasattr(objects, "bucket"):
        raise WorkerFailed("RM_COMPUTE=modal needs S3 (set S3_BUCKET and the other S3_* "
                           "variables): the GPU function reads its inputs and writes the "
                           "checkpoint there")
    prefix = f"jobs/{job_dir.parent.name}/{job_dir.name}"
    inputs = {name: objects.put_file(f"{prefix}/{name}", job_dir / name)
              for name in INPUT_FILES if (job_dir / name).is_file()}
    reader = s3_message_reader(bucket=objects.bucket, client=objects.client,
                               interval=PIPES_POLL_S)
    with dg.open_pipes_session(context=context, context_injector=dg.PipesEnvContextInjector(),
                               message_reader=reader) as session:
        result = function.remote(inputs=inputs, upload_key=upload_key,
                                 checkpoint_uri=checkpoint_uri,
                                 pipes_env=dict(session.get_bootstrap_env_vars()))
    return write_results(job_dir, result)


def write_results(job_dir: Path, result: dict[str, Any]) -> str | None:
    """The function's JSON as the job directory's files; WorkerFailed when the job failed."""
    (job_dir / LOG).write_text(result.get("log_tail") or "")
    if result.get("exit_code") != 0 or result.get("metrics") is None:
        raise WorkerFailed(result.get("log_tail")
                           or f"the Modal worker exited {result.get('exit_code')}")
    (job_dir / METRICS).write_text(json.dumps(result["metrics"], indent=2))
    (job_dir / SCORES).write_text("".join(json.dumps(row) + "\n" for row in result["scores"]))
    for name, key in ((ACTION_SCORES, "action_scores"), (PAIR_REWARDS, "pair_rewards"),
                      (FINISHED, "finished_traces")):
        if result.get(key) is not None:
            (job_dir / name).write_text("".join(json.dumps(row) + "\n" for row in result[key]))
    if result.get("losses") is not None:
        (job_dir / LOSSES).write_text(json.dumps(result["losses"]))
    uri = result.get("checkpoint_uri")
    if uri:
        record_upload(job_dir, uri, result.get("upload_seconds", 0.0), counted=True)
    return uri
