"""Dagster instance folders whose storage already exists: created once a session, copied per test.

Creating Dagster's SQLite storage (runs, event-log index, schedules) costs 0.2-0.7 s of CPU, and
every test that imports through the API or the CLI, or runs a job, would pay it for its own fresh
instance. The event log's shard of runless events (``history/runs/.db``), where each import's
``traces`` materialisation goes, is created too: creating it on an instance's first import cost
about 20 ms, and hundreds of tests import. The session creates each kind of folder once; a test
starts from a copy of those empty files, which are the files its first use would have written.
Tests of the first use itself (parallel first commands into a fresh STASH_HOME) set a STASH_HOME
of their own and get none.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from unittest import mock

import dagster as dg


def created_embedded_instance(stash_home: Path) -> Path:
    """``$STASH_HOME/dagster`` as ``instance.get_instance`` creates it, under ``stash_home``."""
    from stash_pipeline.dagster_runs.instance import get_instance

    # The whole environment comes back afterwards: get_instance sets DAGSTER_HOME itself.
    with mock.patch.dict(os.environ, {"STASH_HOME": str(stash_home)}):
        os.environ.pop("DAGSTER_HOME", None)
        _create_runless_event_shard(get_instance())
    return stash_home / "dagster"


def created_test_instance(folder: Path) -> Path:
    """A folder holding the storage of ``dg.instance_for_test(temp_dir=folder)``."""
    with dg.instance_for_test(temp_dir=str(folder)) as instance:
        # Every storage now (Dagster creates some on first use).
        instance.get_runs(limit=1)
        instance.all_instigator_state()
        instance.get_latest_materialization_event(dg.AssetKey("traces"))
        _create_runless_event_shard(instance)
    return folder


def _create_runless_event_shard(instance: dg.DagsterInstance) -> None:
    """The SQLite event log's shard of events without a run, empty: opening a connection to a shard
    creates its tables (``SqliteEventLogStorage._connect``)."""
    from dagster._core.instance.utils import RUNLESS_RUN_ID

    with instance.event_log_storage.run_connection(RUNLESS_RUN_ID):
        pass


def copy_of(template: Path, target: Path) -> Path:
    """``target``, a copy of the created folder ``template``."""
    shutil.copytree(template, target, dirs_exist_ok=True)
    return target


def queued_run_origin(job: str):
    """The code origin a sensor's run of ``job`` carries: a queued run names the code it comes
    from, and the run queue reads it."""
    from dagster._core.remote_origin import (
        InProcessCodeLocationOrigin,
        RemoteJobOrigin,
        RemoteRepositoryOrigin,
    )
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

    return RemoteJobOrigin(RemoteRepositoryOrigin(InProcessCodeLocationOrigin(
        LoadableTargetOrigin(module_name="stash_pipeline.definitions")), "__repository__"), job)
