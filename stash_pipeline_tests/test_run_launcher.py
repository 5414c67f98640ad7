"""ProcessRunLauncher (issue 50): a run's process is its own, named in its tags; terminating the
run interrupts that process as Dagster interrupts a run, and run monitoring fails a run whose
process ended without ending it. Launching is held by defs/test_code_server_replacement.py, with
a real daemon and code server."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys

import dagster as dg
import pytest
from dagster._core.launcher import WorkerStatus
from dagster._daemon.monitoring.run_monitoring import monitor_started_run

from stash_pipeline.defs.abandoned_runs import process_tag
from stash_pipeline.run_launcher import RUN_PROCESS_TAG, ProcessRunLauncher
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, bound

LAUNCHER = {"run_launcher": {"module": "stash_pipeline.run_launcher",
                             "class": "ProcessRunLauncher"},
            "run_monitoring": {"enabled": True}}


@pytest.fixture
def instance(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path), overrides=LAUNCHER) as instance:
        assert isinstance(instance.run_launcher, ProcessRunLauncher)
        yield instance


def started_run(instance: dg.DagsterInstance, tags: dict[str, str]) -> dg.DagsterRun:
    return instance.add_run(dg.DagsterRun(job_name="job", run_id=f"run-{len(tags)}",
                                          status=dg.DagsterRunStatus.STARTED, tags=tags))


def a_process() -> subprocess.Popen:
    """A process that ends on SIGINT with Python's KeyboardInterrupt, as a run's does."""
    process = subprocess.Popen([sys.executable, "-c",
                                "import sys, time; print('ready', flush=True); time.sleep(600)"],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"  # its SIGINT handler is in place
    return process


def test_terminate_interrupts_the_runs_process(instance):
    process = a_process()
    try:
        run = started_run(instance, {RUN_PROCESS_TAG: process_tag(process.pid)})
        assert instance.run_launcher.terminate(run.run_id)
        process.wait(timeout=bound(PROCESS_EXIT_S))
        assert process.returncode != 0  # interrupted, not left running
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELING
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_run_without_a_process_here_is_not_terminated(instance):
    run = started_run(instance, {RUN_PROCESS_TAG: "another-host:1:1"})
    assert not instance.run_launcher.terminate(run.run_id)
    records = instance.get_records_for_run(run.run_id,
                                           of_type=dg.DagsterEventType.ENGINE_EVENT).records
    assert any("not running on this host" in r.event_log_entry.dagster_event.message
               for r in records), [r.event_log_entry.dagster_event.message for r in records]


def test_run_monitoring_fails_a_run_whose_process_was_killed(instance):
    process = a_process()
    run = started_run(instance, {RUN_PROCESS_TAG: process_tag(process.pid)})
    record = instance.get_run_record_by_id(run.run_id)
    logger = logging.getLogger("test")
    monitor_started_run(instance, None, record, logger)  # alive: nothing happens
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
    process.send_signal(signal.SIGKILL)
    process.wait()
    monitor_started_run(instance, None, record, logger)
    failed = instance.get_run_by_id(run.run_id)
    assert failed.status == dg.DagsterRunStatus.FAILURE
    [failure] = instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records
    assert (f"the run's process (pid {process.pid}) ended before the run did (it was killed)"
            in failure.event_log_entry.dagster_event.message)


def test_run_monitoring_leaves_runs_it_cannot_see_to_their_timeouts(instance):
    """A `--wait` command's run (no process of the launcher's) or another host's."""
    for tags in ({}, {RUN_PROCESS_TAG: "another-host:1:1"}):
        run = started_run(instance, tags)
        health = instance.run_launcher.check_run_worker_health(run)
        assert health.status == WorkerStatus.RUNNING


def test_a_run_starts_with_the_code_locations_python_not_a_bare_dagster_on_path():
    from stash_pipeline.run_launcher import run_command

    # `dg dev`'s code server records the bare entry point "dagster" (not on PATH without an
    # activated virtualenv); the run starts with the interpreter the code location runs.
    arguments = ["dagster", "api", "execute_run", "{}"]
    assert run_command("/venv/bin/python", arguments) == [
        "/venv/bin/python", "-m", "dagster", "api", "execute_run", "{}"]
    assert run_command("/venv/bin/python", ["/x/python", "-m", "dagster", "api", "execute_run",
                                             "{}"])[:3] == ["/venv/bin/python", "-m", "dagster"]


def test_the_next_run_takes_the_spare_process_started_before_it(instance):
    """A spare (run_spare) has imported Dagster and the code location and opened the instance
    before the run: the run's process is that one, given the run's arguments, not a new one."""
    from dagster._serdes import serialize_value

    from stash_pipeline.run_launcher import Spares

    spares = Spares()
    spares.prepare(sys.executable, serialize_value(instance.get_ref()))
    prepared = spares._spare[0]
    taken = spares.take(sys.executable, ["--version"])  # what `dagster --version` runs
    assert taken is prepared
    assert taken.wait(timeout=bound(PROCESS_EXIT_S)) == 0
    assert spares.take(sys.executable, ["--version"]) is None  # one spare, taken once


def test_a_spare_of_older_code_or_another_python_is_let_go(instance, monkeypatch):
    from dagster._serdes import serialize_value

    import stash_pipeline.run_launcher as launcher

    ref = serialize_value(instance.get_ref())
    spares = launcher.Spares()
    spares.prepare(sys.executable, ref)
    older = spares._spare[0]
    monkeypatch.setattr(launcher, "code_version", lambda: -1)  # the code changed since
    assert spares.take(sys.executable, ["--version"]) is None
    assert older.wait(timeout=bound(PROCESS_EXIT_S)) == 0  # its stdin closed: it exits
    spares.prepare(sys.executable, ref)
    other = spares._spare[0]
    assert spares.take("/another/python", ["--version"]) is None
    assert other.wait(timeout=bound(PROCESS_EXIT_S)) == 0
