"""The embedded default: objects as files under a root directory (``$STASH_HOME/objects``).

URIs are ``file://`` URIs of absolute paths under the root (``Path.as_uri()``). Download URLs are
signed API URLs when an API URL is configured, else the ``file://`` URI itself, which cannot expire.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, urlsplit
from urllib.request import url2pathname

from stash_pipeline.core.errors import disk_full
from stash_pipeline.core.training_settings import DOWNLOAD_URL_EXPIRES_S
from stash_pipeline.objects.base import ObjectStore, check_expires_s, download_target, source_file
from stash_pipeline.objects.errors import (
    ObjectLocationError,
    ObjectNotFoundError,
    ObjectStoreConfigError,
    ObjectStoreFullError,
)
from stash_pipeline.objects.keys import validate_key
from stash_pipeline.objects.signing import UrlSigner

# The route the HTTP API serves signed downloads on: <api url>/api/v1/objects/<key>.
DOWNLOAD_ROUTE = "/api/v1/objects/"


class LocalObjectStore(ObjectStore):
    def __init__(self, root: str | os.PathLike[str], *, api_url: str | None = None,
                 signer: UrlSigner | None = None):
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        if api_url and signer is None:
            raise ObjectStoreConfigError("signed download URLs need a signing key")
        self.api_url = api_url.rstrip("/") if api_url else None
        self._signer = signer

    def __repr__(self) -> str:
        return f"LocalObjectStore({str(self.root)!r}, api_url={self.api_url!r})"

    def uri_for(self, key: str) -> str:
        return self.path_for(key).as_uri()

    def path_for(self, key: str) -> Path:
        """The file that holds ``key`` (the API streams it after ``verify_signed_download``)."""
        return self.root / validate_key(key)

    def key_of(self, uri: str) -> str:
        parts = urlsplit(uri)
        if parts.scheme != "file" or parts.netloc not in ("", "localhost") or parts.query \
                or parts.fragment:
            raise ObjectLocationError(
                f"{uri!r} is not a file:// URI of this store (its objects live under "
                f"{self.root.as_uri()})")
        path = Path(url2pathname(parts.path))
        if not path.is_absolute() or not path.is_relative_to(self.root):
            raise ObjectLocationError(f"{uri!r} is outside this store's root {self.root.as_uri()}")
        return validate_key(path.relative_to(self.root).as_posix())

    def put_file(self, key: str, path: str | os.PathLike[str]) -> str:
        target = self.path_for(key)
        source = source_file(path)
        with _full_disk_refused(f"no space left in the local object store to write {key}"):
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(source, "rb") as reader:
                _write_atomically(target, reader)
        return target.as_uri()

    def get_file(self, uri: str, destination: str | os.PathLike[str]) -> Path:
        key = self.key_of(uri)
        target = download_target(destination, key)
        try:
            reader = open(self.path_for(key), "rb")
        except FileNotFoundError:
            raise ObjectNotFoundError(f"no object at {uri}") from None
        with reader, _full_disk_refused(f"no space left to download {key} to {target.parent}"):
            _write_atomically(target, reader)
        return target

    def exists(self, uri: str) -> bool:
        return self.path_for(self.key_of(uri)).is_file()

    def delete(self, uri: str) -> None:
        self.path_for(self.key_of(uri)).unlink(missing_ok=True)

    def download_url(self, uri: str, expires_s: int = DOWNLOAD_URL_EXPIRES_S) -> str:
        """A signed ``<api url>/api/v1/objects/<key>?expires=..&signature=..`` URL valid for
        ``expires_s``; without an API URL, the ``file://`` URI, which no one can make expire."""
        key = self.key_of(uri)
        check_expires_s(expires_s)
        if not self.exists(uri):
            raise ObjectNotFoundError(f"no object at {uri}")
        if self.api_url is None:
            return self.uri_for(key)
        expires, signature = self._signer.sign(key, expires_s)
        return (f"{self.api_url}{DOWNLOAD_ROUTE}{quote(key, safe='/')}"
                f"?expires={expires}&signature={signature}")

    def verify_signed_download(self, key: str, expires: int | str, signature: str,
                               now: float | None = None) -> Path:
        """The file to serve for a signed URL's key, expiry and signature.

        Refuses an altered or malformed URL (``DownloadSignatureError``), an expired one
        (``DownloadExpiredError``), then a key with no object (``ObjectNotFoundError``).
        """
        if self._signer is None:
            raise ObjectStoreConfigError("this store has no signing key to check URLs with")
        self._signer.verify(key, expires, signature, now)
        path = self.path_for(key)
        if not path.is_file():
            raise ObjectNotFoundError(f"no object at {path.as_uri()}")
        return path


@contextmanager
def _full_disk_refused(message: str) -> Iterator[None]:
    """A full disk as the store's own error (nothing was written: see ``_write_atomically``)."""
    try:
        yield
    except OSError as error:
        if disk_full(error):
            raise ObjectStoreFullError(f"{message} ({error.strerror}); nothing was stored"
                                       ) from None
        raise


def _write_atomically(target: Path, reader) -> None:  # reader: a binary file object
    """Copy ``reader`` into a hidden temporary file next to ``target``, then rename it over that.

    The rename is atomic on one filesystem, so readers see the old file or the whole new one; on any
    failure the temporary file is removed and ``target`` is untouched. Temporary names start with
    '.', which no key may, so they are never mistaken for objects. Files are private (mode 0600,
    from ``mkstemp``), as checkpoints are in the seed's private bucket.
    """
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                             suffix=".partial")
    try:
        with os.fdopen(descriptor, "wb") as writer:
            shutil.copyfileobj(reader, writer, 1024 * 1024)
            writer.flush()
            os.fsync(writer.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable, so a crash cannot bring back the old object."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
