"""Signed download URLs for the local store, which the HTTP API serves and checks.

The signature is HMAC-SHA256 over ``<key>\\n<expires>`` (expires: a unix time in whole seconds), in
hex. The secret is ``STASH_SIGNING_KEY`` or, when that is unset, a random key created once in
``$STASH_HOME/signing.key`` (mode 0600), which every process sharing ``STASH_HOME`` reads.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import re
import secrets
import stat
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from stash_pipeline.objects.errors import (
    DownloadExpiredError,
    DownloadSignatureError,
    ObjectStoreConfigError,
)

SIGNING_KEY_ENV = "STASH_SIGNING_KEY"
SIGNING_KEY_FILE = "signing.key"
MIN_SECRET_CHARS = 32
_HEX_SIGNATURE = re.compile(r"[0-9a-f]{64}")
_UNIX_TIME = re.compile(r"[0-9]{1,12}")


class UrlSigner:
    """Signs and checks (key, expiry) pairs with one secret."""

    def __init__(self, secret: bytes):
        if len(secret) < MIN_SECRET_CHARS:
            raise ObjectStoreConfigError(
                f"the URL signing secret must be at least {MIN_SECRET_CHARS} characters")
        self._secret = secret

    def __repr__(self) -> str:  # never the secret
        return "UrlSigner(<secret>)"

    def signature(self, key: str, expires: int) -> str:
        return hmac.new(self._secret, f"{key}\n{expires}".encode(), hashlib.sha256).hexdigest()

    def sign(self, key: str, expires_s: int, now: float | None = None) -> tuple[int, str]:
        """``(expires, signature)`` for a URL valid ``expires_s`` seconds from ``now``."""
        expires = int(time.time() if now is None else now) + expires_s
        return expires, self.signature(key, expires)

    def verify(self, key: str, expires: int | str, signature: str,
               now: float | None = None) -> None:
        """Refuse an altered URL (``DownloadSignatureError``), then an expired one
        (``DownloadExpiredError``).

        The signature is checked first, so moving the expiry of a URL makes it altered, not valid.
        """
        expires_text = str(expires)
        if not _UNIX_TIME.fullmatch(expires_text):
            raise DownloadSignatureError(
                f"download of {key!r} refused: 'expires' must be a unix time in whole seconds")
        if not isinstance(signature, str) or not _HEX_SIGNATURE.fullmatch(signature):
            raise DownloadSignatureError(
                f"download of {key!r} refused: 'signature' must be 64 lowercase hex digits")
        expires_at = int(expires_text)
        if not hmac.compare_digest(self.signature(key, expires_at), signature):
            raise DownloadSignatureError(
                f"download of {key!r} refused: the signature does not match this key and expiry "
                "(the URL was altered or signed with another secret)")
        current = time.time() if now is None else now
        if current > expires_at:
            raise DownloadExpiredError(
                f"download of {key!r} refused: the URL expired {int(current) - expires_at} s ago; "
                "ask for a new one")


def signing_secret_from_env(environ: Mapping[str, str], home: Path) -> bytes:
    """``STASH_SIGNING_KEY``, else the key file under ``home`` (created on first use)."""
    configured = environ.get(SIGNING_KEY_ENV)
    if configured:
        if len(configured) < MIN_SECRET_CHARS:
            raise ObjectStoreConfigError(
                f"{SIGNING_KEY_ENV} must be at least {MIN_SECRET_CHARS} characters "
                "(e.g. the output of `python -c 'import secrets; print(secrets.token_hex(32))'`)")
        return configured.encode()
    return load_or_create_key_file(home / SIGNING_KEY_FILE)


def load_or_create_key_file(path: Path) -> bytes:
    """The secret in ``path``, which is created with a random secret when it does not exist.

    Race-free: the secret is written whole to a private temporary file that is then hard-linked to
    ``path``; linking fails when another process got there first, and then its key is the one used.
    No process ever reads a half-written key.
    """
    try:
        return _read_key_file(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):  # another process's key won: use that one
            os.link(temporary, path)
    finally:
        os.unlink(temporary)
    return _read_key_file(path)


def _read_key_file(path: Path) -> bytes:
    with open(path, encoding="ascii", errors="replace") as handle:
        mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
        if mode & 0o077:
            raise ObjectStoreConfigError(
                f"{path} is readable by other users (mode {mode:04o}): run `chmod 600 {path}`")
        secret = handle.read().strip()
    if len(secret) < MIN_SECRET_CHARS:
        raise ObjectStoreConfigError(
            f"{path} holds no usable signing key (under {MIN_SECRET_CHARS} characters): delete it "
            "to have a new one created, which invalidates the URLs signed so far")
    return secret.encode()
