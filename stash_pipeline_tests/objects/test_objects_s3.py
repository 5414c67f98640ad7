"""The S3 store against moto's server on loopback, through a real boto3 client."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import EndpointConnectionError

from stash_pipeline.objects import (
    ObjectLocationError,
    ObjectNotFoundError,
    ObjectStoreError,
    S3ObjectStore,
    S3Settings,
    reward_model_checkpoint_key,
    shared_evaluator_checkpoint_key,
)
from stash_pipeline_tests.support.object_helpers import (
    ACCESS_KEY,
    SECRET_KEY,
    assert_no_credentials,
    random_file,
    sha256,
)

MIB = 1024 * 1024
KEY = reward_model_checkpoint_key("model-1", 1)
# S3's smallest part is 5 MiB: a 12 MiB file goes up in three parts.
SMALL_PARTS = TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)


def admin_client(settings: S3Settings):  # a boto3 client
    """A second, independent client: what the test checks is what S3 holds, not what we think."""
    return boto3.client("s3", endpoint_url=settings.endpoint, region_name=settings.region,
                        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)


def test_multipart_round_trip(s3_settings: S3Settings, tmp_path: Path) -> None:
    store = S3ObjectStore(s3_settings, transfer_config=SMALL_PARTS)
    source = random_file(tmp_path / "reward-model.tar.gz", 12 * MIB + 5)
    uri = store.put_file(KEY, source)
    assert uri == f"s3://{s3_settings.bucket}/{KEY}"

    head = admin_client(s3_settings).head_object(Bucket=s3_settings.bucket, Key=KEY)
    assert head["ContentLength"] == 12 * MIB + 5
    assert head["ETag"].strip('"').endswith("-3")  # a multipart upload of three parts

    assert store.exists(uri)
    fetched = store.get_file(uri, tmp_path / "out" / "ckpt.tar.gz")
    assert sha256(fetched) == sha256(source)
    into_dir = store.get_file(uri, tmp_path / "out")
    assert into_dir == tmp_path / "out" / "reward-model.tar.gz"
    assert sha256(into_dir) == sha256(source)

    store.delete(uri)
    assert not store.exists(uri)
    store.delete(uri)
    with pytest.raises(ObjectNotFoundError, match=f"no object at s3://{s3_settings.bucket}/"):
        store.get_file(uri, tmp_path / "again.tar.gz")
    assert not (tmp_path / "again.tar.gz").exists()
    with pytest.raises(ObjectNotFoundError):
        store.download_url(uri)


def test_presigned_url_downloads_and_expires_in_five_minutes(s3_settings: S3Settings,
                                                             tmp_path: Path) -> None:
    store = S3ObjectStore(s3_settings)
    source = random_file(tmp_path / "x.bin", 2 * MIB)
    uri = store.put_file(shared_evaluator_checkpoint_key("v1"), source)

    before = int(time.time())
    url = store.download_url(uri)
    after = time.time()
    with urllib.request.urlopen(url) as response:  # no credentials: the URL carries the signature
        assert response.read() == source.read_bytes()

    # moto serves expired URLs too, so the rule is checked on the URL: S3 refuses a request after
    # X-Amz-Date + X-Amz-Expires.
    query = {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-Expires"] == "300"
    signed_at = datetime.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ")
    signed_at = signed_at.replace(tzinfo=UTC)
    assert before <= signed_at.timestamp() <= after  # signed when the URL was made
    assert SECRET_KEY not in url

    shorter = parse_qs(urlsplit(store.download_url(uri, expires_s=60)).query)
    assert shorter["X-Amz-Expires"] == ["60"]


def test_a_failed_multipart_upload_leaves_the_old_object_and_no_parts(
        s3_settings: S3Settings, tmp_path: Path) -> None:
    store = S3ObjectStore(s3_settings, transfer_config=SMALL_PARTS)
    old = random_file(tmp_path / "old.bin", 1000)
    uri = store.put_file(KEY, old)

    # The connection drops at part 2, after part 1 has reached the server (botocore's own event
    # hooks on the real client; the server is untouched).
    def drop_part_two(params, **_kwargs) -> None:
        if params.get("PartNumber") == 2:
            raise EndpointConnectionError(endpoint_url=s3_settings.endpoint)

    store.client.meta.events.register("before-parameter-build.s3.UploadPart", drop_part_two)
    with pytest.raises(ObjectStoreError, match=r"upload to s3://.* failed") as refused:
        store.put_file(KEY, random_file(tmp_path / "new.bin", 12 * MIB))
    assert_no_credentials(refused.value)
    store.client.meta.events.unregister("before-parameter-build.s3.UploadPart", drop_part_two)

    assert sha256(store.get_file(uri, tmp_path / "check.bin")) == sha256(old)
    uploads = admin_client(s3_settings).list_multipart_uploads(Bucket=s3_settings.bucket)
    assert uploads.get("Uploads", []) == []  # the transfer manager aborted it


def test_uris_of_other_stores_are_refused(s3_settings: S3Settings, tmp_path: Path) -> None:
    store = S3ObjectStore(s3_settings)
    store.put_file(KEY, random_file(tmp_path / "x.bin", 10))
    for other in (f"s3://another-bucket/{KEY}", f"file:///tmp/{KEY}", KEY,
                  f"s3://{s3_settings.bucket}/../{KEY}", f"s3://{s3_settings.bucket}//{KEY}",
                  f"s3://{s3_settings.bucket}/{KEY}?versionId=1"):
        for call in (store.exists, store.delete, store.download_url,
                     lambda u: store.get_file(u, tmp_path / "out")):
            with pytest.raises(ObjectLocationError):
                call(other)
    for key in ("../x", "/abs/x", "a/../../x"):
        with pytest.raises(ObjectLocationError):
            store.put_file(key, tmp_path / "x.bin")


def test_s3_failures_are_clear_and_carry_no_credentials(s3_settings: S3Settings,
                                                        tmp_path: Path) -> None:
    missing_bucket = S3Settings(bucket="stash-no-such-bucket", region=s3_settings.region,
                                access_key=ACCESS_KEY, secret_key=SECRET_KEY,
                                endpoint=s3_settings.endpoint)
    store = S3ObjectStore(missing_bucket)
    assert SECRET_KEY not in repr(store) and ACCESS_KEY not in repr(store)
    with pytest.raises(ObjectStoreError, match="NoSuchBucket") as refused:
        store.put_file(KEY, random_file(tmp_path / "x.bin", 10))
    assert_no_credentials(refused.value)

    unreachable = S3ObjectStore(S3Settings(bucket="b-unreachable", region=s3_settings.region,
                                           access_key=ACCESS_KEY, secret_key=SECRET_KEY,
                                           endpoint="http://127.0.0.1:9"))
    with pytest.raises(ObjectStoreError, match="existence check of s3://b-unreachable/") as refused:
        unreachable.exists(f"s3://b-unreachable/{KEY}")
    assert_no_credentials(refused.value)
