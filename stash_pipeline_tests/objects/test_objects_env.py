"""object_store_from_env: S3 with S3_BUCKET, else $STASH_HOME/objects; clear config errors."""

from __future__ import annotations

import stat
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from stash_pipeline.objects import (
    DownloadSignatureError,
    LocalObjectStore,
    ObjectNotFoundError,
    ObjectStoreConfigError,
    S3ObjectStore,
    S3Settings,
    object_store_from_env,
)
from stash_pipeline_tests.support.object_helpers import (
    SECRET_KEY,
    assert_no_credentials,
    random_file,
    s3_environ,
    sha256,
)

SIGNING_KEY = "k" * 40


def test_s3_when_a_bucket_is_set(s3_settings: S3Settings, tmp_path: Path) -> None:
    environ = {**s3_environ(s3_settings), "STASH_HOME": str(tmp_path / "home")}
    store = object_store_from_env(environ)
    assert isinstance(store, S3ObjectStore) and store.bucket == s3_settings.bucket
    source = random_file(tmp_path / "x.bin", 1000)
    uri = store.put_file("a/x.bin", source)
    assert sha256(store.get_file(uri, tmp_path / "y.bin")) == sha256(source)
    assert not (tmp_path / "home").exists()  # S3 writes nothing locally, no signing key either


def test_require_s3_refuses_the_local_directory(s3_settings: S3Settings, tmp_path: Path) -> None:
    with pytest.raises(ObjectStoreConfigError, match="S3_BUCKET is not set: this needs S3"):
        object_store_from_env({"STASH_HOME": str(tmp_path)}, require_s3=True)
    assert not (tmp_path / "objects").exists()
    assert isinstance(object_store_from_env(s3_environ(s3_settings), require_s3=True),
                      S3ObjectStore)


def test_s3_endpoint_is_optional(s3_settings: S3Settings) -> None:
    environ = {**s3_environ(s3_settings), "S3_ENDPOINT": ""}
    store = object_store_from_env(environ)
    assert isinstance(store, S3ObjectStore)
    assert store.settings.endpoint is None
    assert store.client.meta.endpoint_url == f"https://s3.{s3_settings.region}.amazonaws.com"


@pytest.mark.parametrize("missing", ["S3_ACCESS_KEY", "S3_SECRET_KEY", "S3_REGION"])
def test_a_missing_s3_variable_is_named(s3_settings: S3Settings, missing: str) -> None:
    environ = s3_environ(s3_settings)
    del environ[missing]
    with pytest.raises(ObjectStoreConfigError, match=f"S3_BUCKET is set but {missing} is not") \
            as refused:
        object_store_from_env(environ)
    assert_no_credentials(refused.value)


def test_every_missing_s3_variable_is_named_at_once() -> None:
    environ = {"S3_BUCKET": "b", "S3_SECRET_KEY": SECRET_KEY}
    with pytest.raises(ObjectStoreConfigError,
                       match="S3_BUCKET is set but S3_ACCESS_KEY, S3_REGION are not") as refused:
        object_store_from_env(environ)
    assert_no_credentials(refused.value)


def test_s3_variables_without_a_bucket_are_refused_not_ignored(tmp_path: Path) -> None:
    environ = {"S3_ENDPOINT": "http://127.0.0.1:9000", "S3_SECRET_KEY": SECRET_KEY,
               "STASH_HOME": str(tmp_path)}
    with pytest.raises(ObjectStoreConfigError,
                       match="S3_ENDPOINT, S3_SECRET_KEY are set but S3_BUCKET is not") as refused:
        object_store_from_env(environ)
    assert_no_credentials(refused.value)


def test_a_malformed_endpoint_is_named_without_its_value(s3_settings: S3Settings) -> None:
    environ = {**s3_environ(s3_settings), "S3_ENDPOINT": f"ftp://user:{SECRET_KEY}@host"}
    with pytest.raises(ObjectStoreConfigError, match="S3_ENDPOINT must be an http") as refused:
        object_store_from_env(environ)
    assert_no_credentials(refused.value)


def test_local_directory_under_stash_home(tmp_path: Path) -> None:
    store = object_store_from_env({"STASH_HOME": str(tmp_path / "home")})
    assert isinstance(store, LocalObjectStore)
    assert store.root == tmp_path / "home" / "objects" and store.root.is_dir()
    uri = store.put_file("a/x.bin", random_file(tmp_path / "x.bin", 10))
    assert uri == (tmp_path / "home" / "objects" / "a" / "x.bin").as_uri()
    assert store.download_url(uri) == uri  # no STASH_API_URL: the file URI, which cannot expire
    key_file = tmp_path / "home" / "signing.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_stash_home_defaults_to_dot_stash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = object_store_from_env({})
    assert isinstance(store, LocalObjectStore)
    assert store.root == tmp_path / ".stash" / "objects"


def test_a_relative_stash_home_is_read_as_an_absolute_path(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Read where the settings are read, so a process started elsewhere (a worker in its job
    directory) means the same directory."""
    from stash_pipeline.core.home import stash_home

    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert stash_home({}) == tmp_path / "work" / ".stash"
    assert stash_home({"STASH_HOME": "../home"}).is_absolute()
    store = object_store_from_env({"STASH_HOME": "../home"})
    monkeypatch.chdir(tmp_path)
    assert store.root.is_absolute() and store.root.resolve() == tmp_path / "home" / "objects"


def test_processes_sharing_stash_home_verify_each_others_urls(tmp_path: Path) -> None:
    environ = {"STASH_HOME": str(tmp_path / "home"), "STASH_API_URL": "https://stash.example/"}
    pipeline, api = object_store_from_env(environ), object_store_from_env(environ)
    uri = pipeline.put_file("a/x.bin", random_file(tmp_path / "x.bin", 10))
    url = urlsplit(pipeline.download_url(uri))
    assert url.scheme == "https" and url.netloc == "stash.example"
    query = parse_qs(url.query)
    key = url.path.removeprefix("/api/v1/objects/")
    assert api.verify_signed_download(key, query["expires"][0], query["signature"][0]) == \
        api.root / "a" / "x.bin"


def test_stash_signing_key_is_used_instead_of_a_key_file(tmp_path: Path) -> None:
    environ = {"STASH_HOME": str(tmp_path / "home"), "STASH_API_URL": "http://127.0.0.1:8000",
               "STASH_SIGNING_KEY": SIGNING_KEY}
    store = object_store_from_env(environ)
    uri = store.put_file("a/x.bin", random_file(tmp_path / "x.bin", 10))
    query = parse_qs(urlsplit(store.download_url(uri)).query)
    assert not (tmp_path / "home" / "signing.key").exists()

    # Another STASH_HOME with the same STASH_SIGNING_KEY accepts the signature (and then finds no
    # file, since its directory is another one).
    other_home = object_store_from_env({**environ, "STASH_HOME": str(tmp_path / "elsewhere")})
    with pytest.raises(ObjectNotFoundError):
        other_home.verify_signed_download("a/x.bin", query["expires"][0], query["signature"][0])
    with pytest.raises(DownloadSignatureError):
        object_store_from_env({**environ, "STASH_SIGNING_KEY": "z" * 40}).verify_signed_download(
            "a/x.bin", query["expires"][0], query["signature"][0])


def test_a_short_signing_key_is_refused_without_echoing_it(tmp_path: Path) -> None:
    environ = {"STASH_HOME": str(tmp_path), "STASH_SIGNING_KEY": "short-secret-value"}
    with pytest.raises(ObjectStoreConfigError, match="STASH_SIGNING_KEY must be at least 32") \
            as refused:
        object_store_from_env(environ)
    assert_no_credentials(refused.value, "short-secret-value")


@pytest.mark.parametrize("url", ["stash.example", "ftp://stash.example", "http://x/?a=1"])
def test_a_malformed_api_url_is_named(tmp_path: Path, url: str) -> None:
    with pytest.raises(ObjectStoreConfigError, match="STASH_API_URL must be an http"):
        object_store_from_env({"STASH_HOME": str(tmp_path), "STASH_API_URL": url})
