"""ProcessRunLauncher (issue 50): a run's process is its own, named in its tags; terminating the
run interrupts that process as Dagster interrupts a run, and run monitoring fails a run whose
process ended without ending it. Launching is held by defs/test_code_server_replacement.py, with
a real daemon and code server."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.launcher import WorkerStatus
from dagster._daemon.monitoring.run_monitoring import monitor_started_run

from stash_pipeline.defs.abandoned_runs import process_tag
from stash_pipeline.run_launcher import RUN_PROCESS_TAG, ProcessRunLauncher
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, bound, wait_until

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


def test_runs_are_forked_from_one_forker_that_stays(instance):
    """The forker (run_forker) imported Dagster and the code location and opened the instance
    once: each run's process is a child forked from it, not a new interpreter; the forker reaps
    them, so a run that ended leaves no zombie."""
    from dagster._serdes import serialize_value

    from stash_pipeline.run_launcher import Forker

    forker = Forker()
    ref = serialize_value(instance.get_ref())
    try:
        first = forker.fork(sys.executable, ["--version"], ref)  # what `dagster --version` runs
        process = forker._forker[0]
        second = forker.fork(sys.executable, ["--version"], ref)
        assert forker._forker[0] is process and process.poll() is None  # the same, still there
        assert first and second and first != second != process.pid
        for pid in (first, second):  # ended and reaped by the forker (a zombie keeps /proc)
            wait_until(lambda pid=pid: not Path(f"/proc/{pid}").exists(),
                       timeout_s=PROCESS_EXIT_S, what=f"run process {pid} to end and be reaped")
    finally:
        forker.let_go()
    assert process.wait(timeout=bound(PROCESS_EXIT_S)) == 0  # stdin closed: it exits


def test_the_forker_holds_no_thread_or_connection_a_fork_would_share(tmp_path):
    """Only the forking thread survives a fork, and a socket open in the forker would be every
    child's: after warming, the forker has no other thread and no file it did not have before."""
    script = ("import os, threading\n"
              "from stash_pipeline import run_forker\n"
              "import dagster as dg\n"
              "from dagster._serdes import serialize_value\n"
              f"with dg.instance_for_test(temp_dir={str(tmp_path)!r}) as instance:\n"
              "    ref = serialize_value(instance.get_ref())\n"
              "before = set(os.listdir('/proc/self/fd'))\n"
              "run_forker.warm(ref)\n"
              "print(threading.active_count())\n"
              "print(sorted(set(os.listdir('/proc/self/fd')) - before))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[-3:-1] == ["1", "[]"], out


def test_a_forker_of_older_code_or_another_python_is_let_go(instance, monkeypatch):
    from dagster._serdes import serialize_value

    import stash_pipeline.run_launcher as launcher

    ref = serialize_value(instance.get_ref())
    forker = launcher.Forker()
    try:
        assert forker.fork(sys.executable, ["--version"], ref)
        older = forker._forker[0]
        monkeypatch.setattr(launcher, "code_version", lambda: -1)  # the code changed since
        assert forker.fork(sys.executable, ["--version"], ref)
        assert forker._forker[0] is not older
        assert older.wait(timeout=bound(PROCESS_EXIT_S)) == 0  # its stdin closed: it exits
        current = forker._forker[0]
        assert forker.fork("/another/python", ["--version"], ref) is None  # cannot start one
        assert current.wait(timeout=bound(PROCESS_EXIT_S)) == 0
    finally:
        forker.let_go()
