"""The local store: files under a root, atomic writes, keys that cannot escape, signed URLs."""

from __future__ import annotations

import os
import stat
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from stash_pipeline.objects import (
    DownloadExpiredError,
    DownloadSignatureError,
    LocalObjectStore,
    ObjectLocationError,
    ObjectNotFoundError,
    ObjectStoreConfigError,
    ObjectStoreError,
    UrlSigner,
    local as local_module,
    reward_model_checkpoint_key,
)
from stash_pipeline.objects.signing import load_or_create_key_file
from stash_pipeline_tests.support.object_helpers import random_file, sha256

KEY = reward_model_checkpoint_key("model-1", 1)
SECRET = b"s" * 32
API = "http://127.0.0.1:8000/"


@pytest.fixture
def store(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "objects", api_url=API, signer=UrlSigner(SECRET))


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_round_trip(store: LocalObjectStore, tmp_path: Path) -> None:
    source = random_file(tmp_path / "src" / "reward-model.tar.gz", 3 * 1024 * 1024 + 17)
    uri = store.put_file(KEY, source)
    assert uri == (store.root / KEY).as_uri()
    assert uri.startswith("file:///")
    assert store.exists(uri)
    assert files_under(store.root) == [KEY]
    assert stat.S_IMODE((store.root / KEY).stat().st_mode) == 0o600

    fetched = store.get_file(uri, tmp_path / "out" / "new" / "ckpt.tar.gz")
    assert fetched == tmp_path / "out" / "new" / "ckpt.tar.gz"
    assert sha256(fetched) == sha256(source)
    into_dir = store.get_file(uri, tmp_path / "out")
    assert into_dir == tmp_path / "out" / "reward-model.tar.gz"
    assert sha256(into_dir) == sha256(source)

    store.delete(uri)
    assert not store.exists(uri)
    store.delete(uri)  # absent: no error, as in S3
    with pytest.raises(ObjectNotFoundError, match="no object at file:///"):
        store.get_file(uri, tmp_path / "again")
    with pytest.raises(ObjectNotFoundError):
        store.download_url(uri)


def test_a_root_with_spaces_round_trips_through_its_uri(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "my objects")
    uri = store.put_file("a/b.bin", random_file(tmp_path / "b.bin", 10))
    assert "%20" in uri
    assert store.key_of(uri) == "a/b.bin"
    assert store.exists(uri)


def test_overwrite_that_fails_midway_leaves_the_old_object_and_no_debris(
        store: LocalObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = random_file(tmp_path / "old.bin", 1024 * 1024)
    uri = store.put_file(KEY, old)
    new = random_file(tmp_path / "new.bin", 2 * 1024 * 1024)

    def copy_half_then_fail(reader, writer, length=0) -> None:
        writer.write(reader.read(1024 * 1024))
        raise OSError("No space left on device")

    monkeypatch.setattr(local_module.shutil, "copyfileobj", copy_half_then_fail)
    with pytest.raises(OSError, match="No space left"):
        store.put_file(KEY, new)
    with pytest.raises(OSError, match="No space left"):
        store.put_file(reward_model_checkpoint_key("model-2", 1), new)
    monkeypatch.undo()

    assert files_under(store.root) == [KEY]  # no temporary file, no half of model-2
    assert sha256(store.get_file(uri, tmp_path / "check.bin")) == sha256(old)


def test_readers_see_only_whole_objects_while_a_writer_replaces_them(
        store: LocalObjectStore, tmp_path: Path) -> None:
    size = 4 * 1024 * 1024
    versions = []
    for byte in b"ab":
        path = tmp_path / f"{chr(byte)}.bin"
        path.write_bytes(bytes([byte]) * size)
        versions.append(path)
    store.put_file(KEY, versions[0])
    target = store.root / KEY
    done = threading.Event()

    def writer() -> None:
        try:
            for i in range(12):
                store.put_file(KEY, versions[i % 2])
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    reads = 0
    while not done.is_set() or reads == 0:
        data = target.read_bytes()
        reads += 1
        assert len(data) == size
        assert data in (b"a" * size, b"b" * size)
    thread.join()


@pytest.mark.parametrize("key", ["../escape.bin", "reward-models/../../escape.bin", "/tmp/abs.bin",
                                 "a/.hidden"])
def test_put_refuses_keys_that_escape_the_root(store: LocalObjectStore, tmp_path: Path,
                                               key: str) -> None:
    source = random_file(tmp_path / "x.bin", 10)
    with pytest.raises(ObjectLocationError):
        store.put_file(key, source)
    assert files_under(tmp_path / "objects") == []
    assert not (tmp_path / "escape.bin").exists()


def test_uris_of_other_stores_are_refused(store: LocalObjectStore, tmp_path: Path) -> None:
    uri = store.put_file(KEY, random_file(tmp_path / "x.bin", 10))
    outside = (tmp_path / "x.bin").as_uri()
    for other in ("s3://bucket/" + KEY, outside, uri.replace("file:///", "file://otherhost/"),
                  (store.root / "a" / ".." / ".." / "x.bin").as_uri(), uri + "?x=1",
                  str(store.root / KEY)):
        for call in (store.exists, store.delete, store.download_url,
                     lambda u: store.get_file(u, tmp_path / "out")):
            with pytest.raises(ObjectLocationError):
                call(other)
    assert (tmp_path / "x.bin").exists()


def test_put_of_a_missing_file_is_a_clear_error(store: LocalObjectStore, tmp_path: Path) -> None:
    with pytest.raises(ObjectStoreError, match=r"cannot store .*missing\.bin: no such file"):
        store.put_file(KEY, tmp_path / "missing.bin")


def test_signed_url_is_accepted_until_it_expires(store: LocalObjectStore, tmp_path: Path) -> None:
    import time

    source = random_file(tmp_path / "x.bin", 1000)
    uri = store.put_file(KEY, source)
    before = int(time.time())
    url = store.download_url(uri)
    after = int(time.time())

    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}" == "http://127.0.0.1:8000"
    assert parts.path == f"/api/v1/objects/{KEY}"
    query = {name: values[0] for name, values in parse_qs(parts.query).items()}
    assert set(query) == {"expires", "signature"}
    expires = int(query["expires"])
    assert before + 300 <= expires <= after + 300  # five minutes from now

    key = parts.path.removeprefix("/api/v1/objects/")
    served = store.verify_signed_download(key, query["expires"], query["signature"])
    assert served == store.root / KEY and sha256(served) == sha256(source)
    assert store.verify_signed_download(key, expires, query["signature"], now=expires) == served

    with pytest.raises(DownloadExpiredError, match="expired 1 s ago"):
        store.verify_signed_download(key, expires, query["signature"], now=expires + 1)
    short = urlsplit(store.download_url(uri, expires_s=60))
    assert before + 60 <= int(parse_qs(short.query)["expires"][0]) <= int(time.time()) + 60


def test_altered_signed_urls_are_refused_as_altered(store: LocalObjectStore,
                                                    tmp_path: Path) -> None:
    other_key = reward_model_checkpoint_key("model-2", 1)
    uri = store.put_file(KEY, random_file(tmp_path / "x.bin", 10))
    store.put_file(other_key, random_file(tmp_path / "y.bin", 10))
    query = parse_qs(urlsplit(store.download_url(uri)).query)
    expires, signature = int(query["expires"][0]), query["signature"][0]
    flipped = ("0" if signature[0] != "0" else "1") + signature[1:]

    for key, exp, sig in [
        (KEY, expires, flipped),  # signature changed
        (KEY, expires + 3600, signature),  # expiry pushed back
        (KEY, expires - 600, signature),  # even moved into the past: altered, not expired
        (other_key, expires, signature),  # another object
        (KEY, "soon", signature), (KEY, "-1", signature), (KEY, expires, signature.upper()),
        (KEY, expires, signature[:-2]), (KEY, expires, ""),
    ]:
        with pytest.raises(DownloadSignatureError):
            store.verify_signed_download(key, exp, sig, now=expires - 10)

    another_secret = LocalObjectStore(store.root, api_url=API, signer=UrlSigner(b"t" * 32))
    with pytest.raises(DownloadSignatureError, match="signed with another secret"):
        another_secret.verify_signed_download(KEY, expires, signature, now=expires - 10)
    assert not issubclass(DownloadExpiredError, DownloadSignatureError)
    assert not issubclass(DownloadSignatureError, DownloadExpiredError)


def test_a_signed_url_for_a_deleted_object_is_not_found(store: LocalObjectStore,
                                                        tmp_path: Path) -> None:
    uri = store.put_file(KEY, random_file(tmp_path / "x.bin", 10))
    query = parse_qs(urlsplit(store.download_url(uri)).query)
    store.delete(uri)
    with pytest.raises(ObjectNotFoundError):
        store.verify_signed_download(KEY, query["expires"][0], query["signature"][0])


def test_without_an_api_url_the_download_url_is_the_file_uri(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "objects")
    uri = store.put_file(KEY, random_file(tmp_path / "x.bin", 10))
    assert store.download_url(uri) == uri
    with pytest.raises(ObjectStoreConfigError, match="no signing key"):
        store.verify_signed_download(KEY, 1, "0" * 64)
    with pytest.raises(ObjectStoreConfigError, match="need a signing key"):
        LocalObjectStore(tmp_path / "objects", api_url=API)


@pytest.mark.parametrize("expires_s", [0, -5, 7 * 24 * 3600 + 1, 1.5, True])
def test_download_url_lifetimes_out_of_range_are_refused(store: LocalObjectStore, tmp_path: Path,
                                                         expires_s) -> None:
    uri = store.put_file(KEY, random_file(tmp_path / "x.bin", 10))
    with pytest.raises(ObjectStoreError, match="download URL lifetime"):
        store.download_url(uri, expires_s=expires_s)


def _load_key(path: str) -> bytes:
    return load_or_create_key_file(Path(path))


def test_signing_key_file_is_created_once_private_and_race_free(tmp_path: Path) -> None:
    path = tmp_path / "home" / "signing.key"
    with ProcessPoolExecutor(max_workers=4) as pool:
        keys = set(pool.map(_load_key, [str(path)] * 16))
    assert len(keys) == 1
    (key,) = keys
    assert len(key) == 64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["signing.key"]  # no temporary files
    assert load_or_create_key_file(path) == key


def test_a_signing_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "signing.key"
    load_or_create_key_file(path)
    os.chmod(path, 0o644)
    with pytest.raises(ObjectStoreConfigError, match=r"readable by other users .*chmod 600"):
        load_or_create_key_file(path)
    os.chmod(path, 0o600)
    path.write_text("short\n")
    with pytest.raises(ObjectStoreConfigError, match="no usable signing key"):
        load_or_create_key_file(path)


def test_signing_secrets_shorter_than_32_characters_are_refused() -> None:
    with pytest.raises(ObjectStoreConfigError, match="at least 32 characters"):
        UrlSigner(b"short")
    assert "s" * 8 not in repr(UrlSigner(SECRET))

