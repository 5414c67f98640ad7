"""Objects in an S3 bucket (AWS, or any S3 endpoint such as MinIO), through boto3.

URIs are ``s3://<bucket>/<key>``. Uploads go through boto3's transfer manager, which switches to a
multipart upload above ``multipart_threshold``; S3 makes an object visible only when its upload is
complete (``CompleteMultipartUpload``), and the transfer manager aborts a failed multipart upload,
so readers never see half an object. Download URLs are SigV4 presigned GET URLs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import boto3
from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from stash_pipeline.core.training_settings import DOWNLOAD_URL_EXPIRES_S
from stash_pipeline.objects.base import ObjectStore, check_expires_s, download_target, source_file
from stash_pipeline.objects.errors import (
    ObjectLocationError,
    ObjectNotFoundError,
    ObjectStoreError,
    ObjectStoreUnavailableError,
)
from stash_pipeline.objects.keys import validate_key

_MISSING_CODES = {"404", "NoSuchKey", "NotFound"}
_UNREACHABLE = (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError)
# Answers that say "later": the store is overloaded or failing, not refusing this request.
_BUSY_CODES = {"500", "502", "503", "504", "InternalError", "ServiceUnavailable", "SlowDown",
               "RequestTimeout"}


@dataclass(frozen=True)
class S3Settings:
    """Where the bucket is and how to sign for it; ``repr`` never shows the keys."""

    bucket: str
    region: str
    access_key: str = field(repr=False)
    secret_key: str = field(repr=False)
    endpoint: str | None = None  # None: AWS's own endpoint for the region


class S3ObjectStore(ObjectStore):
    def __init__(self, settings: S3Settings, *, transfer_config: TransferConfig | None = None):
        self.settings = settings
        self.bucket = settings.bucket
        # Boto3's defaults (8 MiB parts, multipart from 8 MiB) suit checkpoints of ~1 GB.
        self.transfer_config = transfer_config or TransferConfig()
        self.client = boto3.session.Session().client(
            "s3",
            endpoint_url=settings.endpoint,
            region_name=settings.region,
            aws_access_key_id=settings.access_key,
            aws_secret_access_key=settings.secret_key,
            config=Config(
                signature_version="s3v4",
                # Self-hosted endpoints (MinIO, a loopback test server) rarely resolve
                # <bucket>.<host>; path-style requests work on every S3 implementation.
                s3={"addressing_style": "path" if settings.endpoint else "auto"},
                retries={"mode": "standard"},
            ),
        )

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.settings!r})"

    def uri_for(self, key: str) -> str:
        return f"s3://{self.bucket}/{validate_key(key)}"

    def key_of(self, uri: str) -> str:
        parts = urlsplit(uri)
        if parts.scheme != "s3" or parts.query or parts.fragment:
            raise ObjectLocationError(
                f"{uri!r} is not an s3:// URI of this store (its objects live under "
                f"s3://{self.bucket}/)")
        if parts.netloc != self.bucket:
            raise ObjectLocationError(
                f"{uri!r} is in bucket {parts.netloc!r}, not this store's bucket {self.bucket!r}")
        return validate_key(parts.path.removeprefix("/"))

    def put_file(self, key: str, path: str | os.PathLike[str]) -> str:
        uri = self.uri_for(key)
        source = source_file(path)
        with self._errors("upload to", uri):
            self.client.upload_file(str(source), self.bucket, key, Config=self.transfer_config)
        return uri

    def get_file(self, uri: str, destination: str | os.PathLike[str]) -> Path:
        key = self.key_of(uri)
        target = download_target(destination, key)
        # The transfer manager writes a temporary file next to the target and renames it when done.
        with self._errors("download of", uri):
            self.client.download_file(self.bucket, key, str(target), Config=self.transfer_config)
        return target

    def exists(self, uri: str) -> bool:
        key = self.key_of(uri)
        try:
            with self._errors("existence check of", uri):
                self.client.head_object(Bucket=self.bucket, Key=key)
        except ObjectNotFoundError:
            return False
        return True

    def delete(self, uri: str) -> None:
        key = self.key_of(uri)
        with self._errors("delete of", uri):
            self.client.delete_object(Bucket=self.bucket, Key=key)

    def download_url(self, uri: str, expires_s: int = DOWNLOAD_URL_EXPIRES_S) -> str:
        """A presigned GET URL; S3 refuses it after its ``X-Amz-Date`` + ``X-Amz-Expires``."""
        key = self.key_of(uri)
        check_expires_s(expires_s)
        if not self.exists(uri):
            raise ObjectNotFoundError(f"no object at {uri}")
        with self._errors("download URL for", uri):
            return self.client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_s)

    @contextmanager
    def _errors(self, operation: str, uri: str) -> Iterator[None]:
        """boto3's failures as our errors: a 404 is ``ObjectNotFoundError``, the rest
        ``ObjectStoreError`` with S3's code and message, scrubbed of the keys and not chained (a
        chained botocore error would print request details under ours)."""
        try:
            yield
        except ClientError as error:
            details = error.response.get("Error", {})
            code = str(details.get("Code", "unknown"))
            if code in _MISSING_CODES:
                raise ObjectNotFoundError(f"no object at {uri}") from None
            message = self._scrub(f"{operation} {uri} failed: S3 answered {code}: "
                                  f"{details.get('Message', '')}")
            if code in _BUSY_CODES:
                raise ObjectStoreUnavailableError(
                    f"the object store is busy: {operation} {uri} failed (S3 answered {code}); "
                    "try again later", detail=message) from None
            raise ObjectStoreError(message) from None
        except (BotoCoreError, Boto3Error) as error:
            message = self._scrub(f"{operation} {uri} failed: {error}")
            # The transfer manager wraps a connection failure in S3UploadFailedError's text.
            if isinstance(error, _UNREACHABLE) or "Could not connect" in str(error):
                # The endpoint's host and port are the operator's (``detail``), not a client's.
                raise ObjectStoreUnavailableError(
                    f"the object store is unavailable: {operation} {uri} failed; try again "
                    "later",
                    detail=message) from None
            raise ObjectStoreError(message) from None

    def _scrub(self, message: str) -> str:
        for secret in (self.settings.secret_key, self.settings.access_key):
            if secret:
                message = message.replace(secret, "<redacted>")
        return message
