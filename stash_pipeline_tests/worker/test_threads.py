"""CPU threads chosen as docs/worker.md ("CPU threads") says: the setting, an explicit
OMP_NUM_THREADS, else the cores the process may use (affinity, cgroup quota); passive OpenMP
waiting in place before torch loads OpenMP, in a real worker process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stash_pipeline.cli import main as cli_main
from stash_pipeline.compute.contract import JobSettings, write_job
from stash_pipeline.compute.worker_log import failure_reason
from stash_pipeline.core.errors import InputError
from stash_pipeline.worker.threads import INTER_OP_THREADS, THREADS_ENV, choose_threads, cpu_quota
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, bound

REPO = Path(__file__).resolve().parents[2]
THREAD_VARIABLES = (THREADS_ENV, "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY",
                    "KMP_BLOCKTIME", "GOMP_SPINCOUNT", "OMP_DISPLAY_ENV")


def clean_env(**values: str) -> dict[str, str]:
    """This process's environment without any thread setting (the suite's conftest sets
    OMP_NUM_THREADS under xdist), plus ``values``."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    return {**env, **values}


@pytest.mark.parametrize("environ, affinity, quota, threads, reason", [
    ({}, {0, 1, 2, 3}, None, 4, "the 4 cores this process may use"),
    ({}, {3}, None, 1, "the 1 core this process may use"),
    ({}, {0, 1, 2, 3}, 2.5, 2, "a CPU quota of 2.5 of 4 cores"),
    ({}, {0, 1, 2, 3}, 0.5, 1, "a CPU quota of 0.5 of 4 cores"),
    ({}, {0, 1}, 8.0, 2, "the 2 cores this process may use"),
    ({"OMP_NUM_THREADS": "3"}, {0, 1}, None, 3, "OMP_NUM_THREADS"),
    ({"OMP_NUM_THREADS": "3,1"}, {0, 1}, None, 3, "OMP_NUM_THREADS"),
    ({"OMP_NUM_THREADS": "many"}, {0, 1}, None, 2, "the 2 cores this process may use"),
    ({THREADS_ENV: "5", "OMP_NUM_THREADS": "3"}, {0, 1}, 1.0, 5, THREADS_ENV),
])
def test_threads_follow_the_setting_then_omp_num_threads_then_the_cores(environ, affinity, quota,
                                                                         threads, reason):
    choice = choose_threads(environ, affinity=affinity, quota=quota)
    assert (choice.intra_op, choice.reason) == (threads, reason)
    assert choice.inter_op == INTER_OP_THREADS == 1
    assert choice.wait_policy == "PASSIVE"


def test_an_explicit_wait_policy_is_kept():
    assert choose_threads({"OMP_WAIT_POLICY": "active"}, affinity={0}).wait_policy == "ACTIVE"


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_a_bad_setting_names_itself(value):
    with pytest.raises(InputError, match=f"{THREADS_ENV} must be a positive integer .*{value!r}"):
        choose_threads({THREADS_ENV: value}, affinity={0})


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_cgroup_v2_quota_is_the_smallest_on_the_way_up(tmp_path):
    root = tmp_path / "cgroup"
    write(root / "cpu.max", "max 100000\n")
    write(root / "app" / "cpu.max", "300000 100000\n")
    write(root / "app" / "worker" / "cpu.max", "150000 100000\n")
    self_cgroup = tmp_path / "self"
    write(self_cgroup, "0::/app/worker\n")
    assert cpu_quota(root, self_cgroup) == 1.5
    write(root / "app" / "cpu.max", "100000 100000\n")
    assert cpu_quota(root, self_cgroup) == 1.0
    write(self_cgroup, "0::/elsewhere\n")  # a container's own cgroup mounted as the root
    assert cpu_quota(root, self_cgroup) is None
    write(root / "cpu.max", "50000 100000\n")
    assert cpu_quota(root, self_cgroup) == 0.5


def test_the_cgroup_v1_quota_and_no_quota(tmp_path):
    root = tmp_path / "cgroup"
    self_cgroup = tmp_path / "self"
    write(self_cgroup, "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n0::/\n")
    write(root / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1\n")
    write(root / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
    assert cpu_quota(root, self_cgroup) is None
    write(root / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "200000\n")
    write(root / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    assert cpu_quota(root, self_cgroup) == 2.0
    assert cpu_quota(root, tmp_path / "missing") is None


CHILD = """
import json, threading
from stash_pipeline.worker.threads import use_cpu_threads
choice = use_cpu_threads()
import torch
seen = []
thread = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
thread.start(); thread.join()
print(json.dumps({"intra": torch.get_num_threads(), "inter": torch.get_num_interop_threads(),
                  "in_thread": seen[0], "described": choice.describe()}))
"""


def run_child(env: dict[str, str], cpus: set[int] | None = None) -> tuple[dict, str]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=bound(PROCESS_EXIT_S),
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_a_process_takes_its_threads_from_its_affinity_the_setting_or_omp_num_threads():
    """Each in a fresh process, as torch reports them afterwards, in the calling thread and in a
    thread started later (the scoring server's engine reads in its own thread)."""
    one_cpu = {sorted(os.sched_getaffinity(0))[0]}
    seen, _ = run_child(clean_env(), cpus=one_cpu)
    assert (seen["intra"], seen["inter"], seen["in_thread"]) == (1, 1, 1), seen
    assert "1 intra-op (the 1 core this process may use)" in seen["described"]
    seen, _ = run_child(clean_env(**{THREADS_ENV: "3", "OMP_NUM_THREADS": "2"}), cpus=one_cpu)
    assert (seen["intra"], seen["in_thread"]) == (3, 3), seen
    seen, _ = run_child(clean_env(OMP_NUM_THREADS="3"), cpus=one_cpu)
    assert (seen["intra"], seen["in_thread"]) == (3, 3), seen
    assert "3 intra-op (OMP_NUM_THREADS)" in seen["described"]


def openmp_display(stderr: str) -> dict[str, str]:
    """What libgomp printed at load (OMP_DISPLAY_ENV=VERBOSE): its settings as it took them."""
    lines = [line.strip() for line in stderr.splitlines() if " = '" in line]
    return {k: v.strip("'") for k, v in (line.split(" = ", 1) for line in lines)}


def test_a_worker_process_loads_openmp_waiting_passively(tmp_path, tiny_base_model,
                                                         synthetic_pairs):
    """``python -m stash_pipeline.worker`` as the pipeline starts it, with nothing set: OpenMP,
    loaded by torch, prints the settings it started with. Passive waiting is a spin count of 0
    (left unset, libgomp spins 300,000 rounds before it sleeps). The job runs on the one core it
    may use and says so in its log."""
    write_job(tmp_path, JobSettings(evaluator="m", base_model=str(tiny_base_model), epochs=1),
              train_pairs=synthetic_pairs(0, 4))
    one_cpu = {sorted(os.sched_getaffinity(0))[0]}
    done = subprocess.run(
        [sys.executable, "-m", "stash_pipeline.worker", str(tmp_path)], cwd=REPO,
        env=clean_env(OMP_DISPLAY_ENV="VERBOSE"), capture_output=True, text=True,
        timeout=bound(PROCESS_EXIT_S), preexec_fn=lambda: os.sched_setaffinity(0, one_cpu))
    assert done.returncode == 0, failure_reason(tmp_path)
    display = openmp_display(done.stderr)
    assert display["GOMP_SPINCOUNT"] == "0", display
    assert display["OMP_WAIT_POLICY"] == "PASSIVE", display
    log = (tmp_path / "worker.log").read_text()
    assert ("torch threads: 1 intra-op (the 1 core this process may use), 1 inter-op; OpenMP "
            "waits passive") in log


def test_an_unset_policy_would_spin(tmp_path):
    """The check above can fail: torch loaded without our choice spins."""
    done = subprocess.run([sys.executable, "-c", "import torch"], cwd=REPO,
                          env=clean_env(OMP_DISPLAY_ENV="VERBOSE"), capture_output=True,
                          text=True, timeout=bound(PROCESS_EXIT_S))
    assert openmp_display(done.stderr)["GOMP_SPINCOUNT"] != "0"


def test_the_scoring_server_refuses_a_bad_setting_before_it_serves(monkeypatch, capsys):
    monkeypatch.setenv(THREADS_ENV, "all")
    assert cli_main(["serve", "--port", "1"]) == 2
    assert f"{THREADS_ENV} must be a positive integer" in capsys.readouterr().err
