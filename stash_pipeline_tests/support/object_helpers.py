"""Values and helpers the object-store tests share."""

from __future__ import annotations

import hashlib
import os
import traceback
from pathlib import Path

from stash_pipeline.objects import S3Settings

# Distinctive values, so a test can prove that no message ever carries them.
ACCESS_KEY = "AKIAOBJECTSTESTKEY01"
SECRET_KEY = "objects-test-secret-9f3c1e7a2b"
REGION = "eu-west-1"


def s3_environ(settings: S3Settings) -> dict[str, str]:
    return {"S3_ENDPOINT": settings.endpoint, "S3_BUCKET": settings.bucket,
            "S3_ACCESS_KEY": settings.access_key, "S3_SECRET_KEY": settings.secret_key,
            "S3_REGION": settings.region}


def random_file(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_no_credentials(error: BaseException, *secrets: str) -> None:
    """Neither the message nor anything a traceback would print (causes included) holds a secret."""
    printed = "".join(traceback.format_exception(error)) + repr(error)
    for secret in (ACCESS_KEY, SECRET_KEY, *secrets):
        assert secret not in printed
