"""Dagster instance folders whose storage already exists: created once a session, copied per test.

Creating Dagster's SQLite storage (runs, event-log index, schedules) costs 0.2-0.7 s of CPU, and
every test that imports through the API or the CLI, or runs a job, would pay it for its own fresh
instance. The session creates each kind of folder once; a test starts from a copy of those empty
files, which are the files its first use would have written. Tests of the first use itself
(parallel first commands into a fresh STASH_HOME) set a STASH_HOME of their own and get none.

Each storage Dagster opens also asks alembic for the head revision of its migrations, and alembic
reads and executes every migration script of the folder again for each ask (0.05-0.15 s of CPU):
a test process opens some thousand storages (every instance, every run's event-log shard).
``revision_maps_read_once`` makes a process read each migration folder once, as a long-running
Dagster process reads it once for the one instance it opens; the revision each database holds is
still read from that database every time.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from unittest import mock

import dagster as dg
from alembic.script import ScriptDirectory


def created_embedded_instance(stash_home: Path) -> Path:
    """``$STASH_HOME/dagster`` as ``instance.get_instance`` creates it, under ``stash_home``."""
    from stash_pipeline.instance import get_instance

    # The whole environment comes back afterwards: get_instance sets DAGSTER_HOME itself.
    with mock.patch.dict(os.environ, {"STASH_HOME": str(stash_home)}):
        os.environ.pop("DAGSTER_HOME", None)
        with get_instance():
            pass
    return stash_home / "dagster"


def created_test_instance(folder: Path) -> Path:
    """A folder holding the storage of ``dg.instance_for_test(temp_dir=folder)``."""
    with dg.instance_for_test(temp_dir=str(folder)) as instance:
        # Every storage now (Dagster creates some on first use).
        instance.get_runs(limit=1)
        instance.all_instigator_state()
        instance.get_latest_materialization_event(dg.AssetKey("traces"))
    return folder


def copy_of(template: Path, target: Path) -> Path:
    """``target``, a copy of the created folder ``template``."""
    shutil.copytree(template, target, dirs_exist_ok=True)
    return target


def revision_maps_read_once() -> None:
    """Every ``ScriptDirectory`` of one migration folder shares the revision map the first one
    read (the scripts of an installed package do not change while a test session runs)."""
    make = ScriptDirectory.from_config.__func__
    if getattr(make, "shares_revision_maps", False):
        return
    maps: dict[tuple, object] = {}

    def from_config(cls, config):
        script = make(cls, config)
        key = (script.dir, tuple(script.version_locations or ()), script.sourceless,
               script.recursive_version_locations)
        script.revision_map = maps.setdefault(key, script.revision_map)
        return script

    from_config.shares_revision_maps = True
    ScriptDirectory.from_config = classmethod(from_config)
