"""The Modal app behind RM_COMPUTE=modal: one A10G function that runs a worker job.

Deploy with `modal deploy deploy/modal_app.py` (MODAL_TOKEN_ID / MODAL_TOKEN_SECRET). The image is
built from deploy/requirements-worker.txt plus the project's own package. The function gets two
Modal secrets and nothing else: `stash-storage` (S3_ENDPOINT, S3_BUCKET, S3_ACCESS_KEY,
S3_SECRET_KEY, S3_REGION) and `stash-model-provider` (ANTHROPIC_API_KEY, optionally HF_TOKEN).
No database, queue or integration credentials reach the GPU process (the seed's rule).
"""

from __future__ import annotations

from pathlib import Path

import modal

from stash_pipeline.compute.remote import MODAL_APP, MODAL_FUNCTION

GPU = "A10G"
TIMEOUT_S = 20 * 60  # the seed: a 20-minute limit per training invocation
SECRETS = ("stash-storage", "stash-model-provider")
REQUIREMENTS = Path(__file__).with_name("requirements-worker.txt")

image = (
    modal.Image.debian_slim(python_version="3.12")
    .pip_install_from_requirements(str(REQUIREMENTS))
    .env({"RM_ARTIFACT_DIR": "/tmp/stash-rm", "RM_WORKER_PYTHON": "/usr/local/bin/python"})
    .add_local_python_source("stash_pipeline")
)
app = modal.App(MODAL_APP, image=image)


@app.function(name=MODAL_FUNCTION, gpu=GPU, timeout=TIMEOUT_S,
              secrets=[modal.Secret.from_name(name) for name in SECRETS])
def run_reward_job(inputs: dict[str, str], upload_key: str | None = None,
                   checkpoint_uri: str | None = None,
                   pipes_env: dict[str, str] | None = None) -> dict:
    """Download the inputs, run the worker, upload the checkpoint to S3, return JSON results."""
    from stash_pipeline.compute.remote import run_remote_job

    return run_remote_job(inputs=inputs, upload_key=upload_key, checkpoint_uri=checkpoint_uri,
                          pipes_env=pipes_env)
