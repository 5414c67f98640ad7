"""S3 for the object-store tests: moto's server mode on loopback, reached with a real boto3 client.

One server per session; each test gets its own bucket, so tests never see each other's objects.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer
from object_helpers import ACCESS_KEY, REGION, SECRET_KEY

from stash_pipeline.objects import S3Settings


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_settings(s3_endpoint: str) -> S3Settings:
    """A fresh, empty bucket on the loopback server."""
    bucket = f"stash-objects-{uuid.uuid4().hex[:12]}"
    admin = boto3.client("s3", endpoint_url=s3_endpoint, region_name=REGION,
                         aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)
    admin.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    return S3Settings(bucket=bucket, region=REGION, access_key=ACCESS_KEY, secret_key=SECRET_KEY,
                      endpoint=s3_endpoint)
