"""What the object store refuses, each kind its own class so callers (the API) can answer it.

No message ever carries a credential: configuration errors name the variable, never its value, and
errors from S3 are re-raised with the secret and access key scrubbed (see ``s3.py``).
"""

from __future__ import annotations

from stash_pipeline.core.errors import StashError, StorageFullError, UnavailableError


class ObjectStoreError(StashError):
    """An object store operation failed; the message names the URI or key."""


class ObjectStoreUnavailableError(ObjectStoreError, UnavailableError):
    """The object store could not be reached or answered that it is busy (S3 5xx, SlowDown)."""


class ObjectStoreFullError(ObjectStoreError, StorageFullError):
    """The local store's disk is full: the object was not written, and no partial file is left."""


class ObjectStoreConfigError(ObjectStoreError):
    """A missing or malformed environment variable; the message names it."""


class ObjectLocationError(ObjectStoreError):
    """A key that would leave the store's root, or a URI that belongs to another store."""


class ObjectNotFoundError(ObjectStoreError):
    """No object at that URI."""


class DownloadRefusedError(StashError):
    """A signed download URL the local store will not serve (the API answers 403)."""


class DownloadExpiredError(DownloadRefusedError):
    """A genuine signed URL whose time is up."""


class DownloadSignatureError(DownloadRefusedError):
    """A signed URL whose key, expiry or signature was altered, or that is malformed."""
