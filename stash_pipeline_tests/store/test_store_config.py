from __future__ import annotations

from stash_pipeline.store import Store
from stash_pipeline.store.engine import database_url_from_env, normalize_url


def test_bare_postgresql_urls_use_psycopg_3() -> None:
    assert normalize_url("postgresql://u@h:5432/d") == "postgresql+psycopg://u@h:5432/d"
    assert normalize_url("postgres://u@h/d") == "postgresql+psycopg://u@h/d"
    assert normalize_url("postgresql+psycopg://u@h/d") == "postgresql+psycopg://u@h/d"
    assert normalize_url("sqlite:///x.db") == "sqlite:///x.db"
    assert Store("postgresql://u@h/d").engine.dialect.driver == "psycopg"


def test_default_database_is_sqlite_under_stash_home(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("STASH_HOME", str(tmp_path / "home"))
    assert database_url_from_env() == f"sqlite:///{tmp_path / 'home' / 'stash.db'}"
    assert (tmp_path / "home").is_dir()


def test_stash_home_defaults_to_dot_stash(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("STASH_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    store = Store.from_env()
    assert store.url == f"sqlite:///{tmp_path / '.stash' / 'stash.db'}"
    store.migrate()
    assert (tmp_path / ".stash" / "stash.db").is_file()


def test_database_url_wins(monkeypatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    assert Store.from_env().url == "postgresql+psycopg://postgres@127.0.0.1:5432/test"
