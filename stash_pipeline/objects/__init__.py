"""Checkpoint storage behind one interface: S3 (boto3) or a local directory; expiring download URLs.

No Dagster and no torch here: the Modal GPU function imports this package to upload checkpoints
straight to S3. See docs/storage.md.
"""

from stash_pipeline.objects.base import ObjectStore
from stash_pipeline.objects.env import object_store_from_env, s3_settings_from_env
from stash_pipeline.objects.errors import (
    DownloadExpiredError,
    DownloadRefusedError,
    DownloadSignatureError,
    ObjectLocationError,
    ObjectNotFoundError,
    ObjectStoreConfigError,
    ObjectStoreError,
    ObjectStoreFullError,
)
from stash_pipeline.objects.keys import (
    reward_model_checkpoint_key,
    shared_evaluator_checkpoint_key,
    validate_key,
)
from stash_pipeline.objects.local import LocalObjectStore
from stash_pipeline.objects.s3 import S3ObjectStore, S3Settings
from stash_pipeline.objects.signing import UrlSigner

__all__ = [
    "DownloadExpiredError", "DownloadRefusedError", "DownloadSignatureError",
    "LocalObjectStore", "ObjectLocationError", "ObjectNotFoundError", "ObjectStore",
    "ObjectStoreConfigError", "ObjectStoreError", "ObjectStoreFullError", "S3ObjectStore",
    "S3Settings", "UrlSigner",
    "object_store_from_env", "reward_model_checkpoint_key", "s3_settings_from_env",
    "shared_evaluator_checkpoint_key", "validate_key",
]
