"""Alembic's migration scripts, read once a process.

Alembic reads and executes every script of a migration folder each time a ``ScriptDirectory`` is
made from a config, and Dagster makes one each time one of its SQLite storages checks its schema: a
command's first Dagster instance reads Dagster's 90 migration scripts four times (0.5-1.5 s of CPU),
and each new run's event-log shard once more. ``share_revision_maps`` makes every
``ScriptDirectory`` of one folder share the revision map the first one read. The scripts of an
installed package do not change while a process runs; the revision each database holds is still
read from that database every time.
"""

from __future__ import annotations

import threading
from typing import Any

from alembic.script import ScriptDirectory

_maps: dict[tuple, Any] = {}
_lock = threading.Lock()


def share_revision_maps() -> None:
    """From now on in this process, one revision map per migration folder (idempotent)."""
    with _lock:
        if getattr(ScriptDirectory.from_config, "shares_revision_maps", False):
            return
        make = ScriptDirectory.from_config.__func__

        def from_config(cls, config):
            script = make(cls, config)
            key = (script.dir, tuple(script.version_locations or ()), script.sourceless,
                   script.recursive_version_locations)
            with _lock:
                script.revision_map = _maps.setdefault(key, script.revision_map)
            return script

        from_config.shares_revision_maps = True  # type: ignore[attr-defined]
        ScriptDirectory.from_config = classmethod(from_config)  # type: ignore[method-assign]
