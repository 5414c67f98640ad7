"""Where the embedded defaults live: ``STASH_HOME``, default ``./.stash`` (relative to the cwd)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

DEFAULT_STASH_HOME = ".stash"


def stash_home(environ: Mapping[str, str]) -> Path:
    """``STASH_HOME`` from ``environ`` (an empty value counts as unset) as an absolute path; not
    created here.

    A relative value (the default ``./.stash`` among them) is taken from this process's working
    directory now, where the settings are read: every path made from it (the SQLite store, the
    object directory, job directories, the Dagster instance) then means the same directory in a
    worker started in its job directory, or in a daemon started elsewhere."""
    return absolute(environ.get("STASH_HOME") or DEFAULT_STASH_HOME)


def absolute(path: str | Path) -> Path:
    """``path`` made absolute against the working directory, without following symlinks (a path
    that is absolute already comes back as it is)."""
    return Path(path).absolute()
