"""The Dagster instance this process talks to, and the pipeline's definitions.

``DAGSTER_HOME`` when set (a deployment's instance), else ``$STASH_HOME/dagster`` with the packaged
``dagster_local.yaml``: the same instance ``stash-pipeline dev`` opens in the UI.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path

import dagster as dg

from stash_pipeline.core.home import absolute, stash_home
from stash_pipeline.store.migration_scripts import share_revision_maps

LOCAL_CONFIG = Path(__file__).parents[1] / "dagster_local.yaml"
CREATED = ".stash-created"  # in the instance folder, once its storage exists


def dagster_home(environ: Mapping[str, str] | None = None) -> Path:
    """The instance folder; the embedded one is created with its dagster.yaml on first use."""
    environ = os.environ if environ is None else environ
    if environ.get("DAGSTER_HOME"):
        return absolute(environ["DAGSTER_HOME"])
    home = stash_home(environ) / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").is_file():
        shutil.copyfile(LOCAL_CONFIG, home / "dagster.yaml")
    return home


# The process's instance and its folder (get_instance).
_open_instance: tuple[Path, dg.DagsterInstance] | None = None
_open_instance_lock = threading.Lock()


def get_instance() -> dg.DagsterInstance:
    """This process's instance, opened on its first use and kept, as Dagster's webserver keeps
    one for all its requests: opening one reads every storage's schema version (a tenth of a
    second or more), and the API records each import and answers each progress poll through it.
    Callers never dispose it. A process whose instance folder changes (tests) gets a new one."""
    global _open_instance
    home = dagster_home()
    os.environ["DAGSTER_HOME"] = str(home)
    with _open_instance_lock:
        if _open_instance is None or _open_instance[0] != home:
            _open_instance = (home, _opened_instance(home))
        return _open_instance[1]


def _opened_instance(home: Path) -> dg.DagsterInstance:
    """The instance of ``home``; its storage is created once, under a lock, so parallel first
    commands (eight imports into a fresh STASH_HOME) never both create it (Dagster's SQLite
    schedule storage would then hold two alembic versions, and every later command fail)."""
    share_revision_maps()  # Dagster's storages read their migration scripts once a process
    if (home / CREATED).is_file():
        return dg.DagsterInstance.get()
    from filelock import FileLock

    try:
        lock = FileLock(home / f"{CREATED}.lock")
        lock.acquire()
    except OSError:  # a read-only DAGSTER_HOME: a deployment created its storage beforehand
        return dg.DagsterInstance.get()
    try:
        instance = dg.DagsterInstance.get()
        if not (home / CREATED).is_file():
            # Every storage now, while the lock is held (Dagster creates some on first use).
            instance.get_runs(limit=1)
            instance.all_instigator_state()
            instance.get_latest_materialization_event(dg.AssetKey("traces"))
            (home / CREATED).write_text("the storage of this instance is created\n")
        return instance
    finally:
        lock.release()


def definitions() -> dg.Definitions:
    """The pipeline's definitions (``stash_pipeline.definitions``), loaded when first asked for."""
    from stash_pipeline.definitions import defs

    return defs()
