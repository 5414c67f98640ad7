"""The object store the environment asks for: S3 when ``S3_BUCKET`` is set, else a directory."""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from stash_pipeline.core.home import stash_home
from stash_pipeline.objects.base import ObjectStore
from stash_pipeline.objects.errors import ObjectStoreConfigError
from stash_pipeline.objects.local import LocalObjectStore
from stash_pipeline.objects.s3 import S3ObjectStore, S3Settings
from stash_pipeline.objects.signing import UrlSigner, signing_secret_from_env

# S3_ENDPOINT is optional (unset: AWS's endpoint for S3_REGION); the rest are needed with a bucket.
S3_REQUIRED = ("S3_BUCKET", "S3_ACCESS_KEY", "S3_SECRET_KEY", "S3_REGION")
S3_VARIABLES = ("S3_ENDPOINT", *S3_REQUIRED)
API_URL_ENV = "STASH_API_URL"
LOCAL_OBJECTS_DIR = "objects"


def object_store_from_env(environ: Mapping[str, str] | None = None, *,
                          require_s3: bool = False) -> ObjectStore:
    """``S3ObjectStore`` when ``S3_BUCKET`` is set, else ``LocalObjectStore($STASH_HOME/objects)``.

    Errors name the variable that is missing or malformed, never a value. Empty values count as
    unset. S3 variables without ``S3_BUCKET`` are refused rather than silently ignored.
    ``require_s3`` refuses the local directory: a remote worker (Modal) must upload to S3, since a
    checkpoint written to its own disk would be lost with the container.
    """
    environ = os.environ if environ is None else environ
    settings = s3_settings_from_env(environ)
    if settings is not None:
        return S3ObjectStore(settings)
    if require_s3:
        raise ObjectStoreConfigError(
            "S3_BUCKET is not set: this needs S3 (S3_BUCKET, S3_ACCESS_KEY, S3_SECRET_KEY, "
            "S3_REGION and, unless the bucket is on AWS, S3_ENDPOINT)")
    home = stash_home(environ)
    return LocalObjectStore(home / LOCAL_OBJECTS_DIR, api_url=api_url_from_env(environ),
                            signer=UrlSigner(signing_secret_from_env(environ, home)))


def s3_settings_from_env(environ: Mapping[str, str]) -> S3Settings | None:
    """The S3 settings, or None when no S3 variable is set."""
    present = [name for name in S3_VARIABLES if environ.get(name)]
    if not present:
        return None
    if "S3_BUCKET" not in present:
        raise ObjectStoreConfigError(
            f"{_names(present)} set but S3_BUCKET is not: "
            "set S3_BUCKET to keep checkpoints in S3, or unset them for the local directory")
    missing = [name for name in S3_REQUIRED if not environ.get(name)]
    if missing:
        raise ObjectStoreConfigError(
            f"S3_BUCKET is set but {_names(missing)} not: "
            "S3 needs S3_BUCKET, S3_ACCESS_KEY, S3_SECRET_KEY and S3_REGION (S3_ENDPOINT too, "
            "unless the bucket is on AWS)")
    endpoint = environ.get("S3_ENDPOINT") or None
    if endpoint is not None:
        _check_http_url("S3_ENDPOINT", endpoint)
    return S3Settings(bucket=environ["S3_BUCKET"], region=environ["S3_REGION"],
                      access_key=environ["S3_ACCESS_KEY"], secret_key=environ["S3_SECRET_KEY"],
                      endpoint=endpoint)


def api_url_from_env(environ: Mapping[str, str]) -> str | None:
    """``STASH_API_URL``: where the HTTP API serves the local store's signed downloads."""
    url = environ.get(API_URL_ENV) or None
    if url is not None:
        _check_http_url(API_URL_ENV, url)
    return url


def _names(names: list[str]) -> str:
    """``A is`` or ``A, B are``."""
    return f"{', '.join(names)} {'is' if len(names) == 1 else 'are'}"


def _check_http_url(name: str, url: str) -> None:
    # The value is not echoed: a URL may carry user:password.
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query \
            or parts.fragment:
        raise ObjectStoreConfigError(
            f"{name} must be an http:// or https:// URL without query or fragment")
