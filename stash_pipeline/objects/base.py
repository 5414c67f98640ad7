"""The one interface every object store implements, and the checks the implementations share."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path

from stash_pipeline.core.training_settings import DOWNLOAD_URL_EXPIRES_S
from stash_pipeline.objects.errors import ObjectStoreError

# SigV4 presigned URLs live at most a week; the local store keeps the same bound.
MAX_EXPIRES_S = 7 * 24 * 3600


class ObjectStore(ABC):
    """Checkpoint storage: whole files in, whole files out, addressed by URI.

    Keys are relative paths that obey ``keys.validate_key``; ``put_file`` turns a key into the URI
    that callers store (``reward_models.checkpoint_uri``) and hand back to the other methods. A URI
    of another store (another scheme, bucket or root) is an ``ObjectLocationError``; a missing
    object is an ``ObjectNotFoundError``.
    """

    @abstractmethod
    def uri_for(self, key: str) -> str:
        """The URI of ``key`` in this store (whether or not an object is there)."""

    @abstractmethod
    def key_of(self, uri: str) -> str:
        """The key of a URI of this store; refuses URIs of other stores and keys that escape."""

    @abstractmethod
    def put_file(self, key: str, path: str | os.PathLike[str]) -> str:
        """Store the file at ``path`` under ``key`` and return its URI.

        Atomic: a reader sees the previous object (or none) until the whole new one is there.
        """

    @abstractmethod
    def get_file(self, uri: str, destination: str | os.PathLike[str]) -> Path:
        """Download the object to ``destination`` (a file path, or a directory to put it in).

        Parent directories are created; the file appears whole or not at all. Returns its path.
        """

    @abstractmethod
    def exists(self, uri: str) -> bool:
        """Whether an object is stored at ``uri``."""

    @abstractmethod
    def delete(self, uri: str) -> None:
        """Remove the object; removing an absent object is not an error (as in S3)."""

    @abstractmethod
    def download_url(self, uri: str, expires_s: int = DOWNLOAD_URL_EXPIRES_S) -> str:
        """A URL that downloads the object without the caller's credentials, for ``expires_s``."""


def check_expires_s(expires_s: int) -> int:
    if isinstance(expires_s, bool) or not isinstance(expires_s, int) \
            or not 1 <= expires_s <= MAX_EXPIRES_S:
        raise ObjectStoreError(
            f"download URL lifetime {expires_s!r}: must be whole seconds from 1 to {MAX_EXPIRES_S}")
    return expires_s


def source_file(path: str | os.PathLike[str]) -> Path:
    """The file ``put_file`` uploads: it must exist and be a regular file."""
    source = Path(path)
    if not source.is_file():
        raise ObjectStoreError(f"cannot store {source}: no such file")
    return source


def download_target(destination: str | os.PathLike[str], key: str) -> Path:
    """``destination``, or ``destination/<key's file name>`` if it is a directory; makes parents."""
    target = Path(destination)
    if target.is_dir():
        target = target / key.rsplit("/", 1)[-1]
    target.parent.mkdir(parents=True, exist_ok=True)
    return target
