"""A compute for tests: the worker runs in the test's own process, through a real Pipes session.

Starting ``python -m stash_pipeline.worker`` costs seconds of imports for a tiny job; here the
worker's ``main`` runs in this process instead, after the same ``open_pipes_session`` the local
compute opens (its bootstrap variables set in this process for the call), so progress and metrics
still arrive as Pipes messages. Everything else (the checkpoint download, the exit check, the
upload) is ``LocalCompute``'s own. Swapped in as Dagster recommends for tests: the definitions get
this ``compute`` resource instead of the environment's. What only a process shows (signals, kills,
exit codes, the Pipes protocol across processes) keeps real workers: mark those tests
``worker_process``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from stash_pipeline.compute.local import LocalCompute
from stash_pipeline.compute.outcome import WorkerExit
from stash_pipeline.compute.pipes import TempFileMessageReader
from stash_pipeline.compute.run import ComputeTarget
from stash_pipeline.defs.resources import ComputeResource
from stash_pipeline.worker.resident import environment


@dataclass(frozen=True)
class InProcessCompute(LocalCompute):
    """``LocalCompute`` whose worker is a call, not a process (no time limit: nothing to kill)."""

    def launch(self, context: Any, job_dir: Path) -> WorkerExit:
        with dg.open_pipes_session(context=context, context_injector=dg.PipesEnvContextInjector(),
                                   message_reader=TempFileMessageReader()) as session:
            code = run_worker_in_process(job_dir, session.get_bootstrap_env_vars())
        return WorkerExit(code, messages=tuple(session.get_custom_messages()))


def run_worker_in_process(job_dir: Path, env: Mapping[str, str]) -> int:
    """The worker's ``main`` on ``job_dir`` in this process, with ``env`` added to the
    environment for the call (Pipes' bootstrap variables among them); its exit status."""
    import datasets
    from dagster_pipes import PipesContext
    from transformers.utils import logging as transformers_logging

    from stash_pipeline.worker.runner import main

    # A worker's own process turns the libraries' progress bars off before it loads them
    # (runner.QUIET_LIBRARIES); in this process they are loaded already.
    transformers_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    with environment(env):
        # open_dagster_pipes hands back a process's one context once it exists: each job here is
        # a new "process", so it starts without the last job's (closed) context.
        PipesContext.set(None)  # type: ignore[arg-type]
        try:
            return main(str(job_dir))
        finally:
            PipesContext.set(None)  # type: ignore[arg-type]


class InProcessComputeResource(ComputeResource):
    """``ComputeResource`` (scratch, kind) whose local compute is ``InProcessCompute``."""

    def target(self) -> ComputeTarget:
        if self.kind != "local":
            return super().target()
        return InProcessCompute(self.python, self.timeout_s)


def with_in_process_compute(defs: dg.Definitions) -> dg.Definitions:
    """The same definitions with the ``compute`` resource swapped for the in-process one."""
    return with_resources(defs, {"compute": InProcessComputeResource()})


def with_resources(defs: dg.Definitions, resources: Mapping[str, Any]) -> dg.Definitions:
    """The same definitions with ``resources`` in place of theirs of the same keys."""
    return dg.Definitions(
        assets=defs.assets, schedules=defs.schedules, sensors=defs.sensors, jobs=defs.jobs,
        resources={**(defs.resources or {}), **resources}, executor=defs.executor,
        loggers=defs.loggers, asset_checks=defs.asset_checks, metadata=defs.metadata)
