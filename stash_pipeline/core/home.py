"""Where the embedded defaults live: ``STASH_HOME``, default ``./.stash`` (relative to the cwd)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

DEFAULT_STASH_HOME = ".stash"


def stash_home(environ: Mapping[str, str]) -> Path:
    """``STASH_HOME`` from ``environ`` (an empty value counts as unset); not created here."""
    return Path(environ.get("STASH_HOME") or DEFAULT_STASH_HOME)
