"""How many CPU threads torch runs and how they wait, chosen once per process (docs/worker.md,
"CPU threads").

Every entry of ours that runs torch (the worker's job runner, the scoring server, ``stash-pipeline
score``, a resident worker) calls ``use_cpu_threads`` before anything of it imports torch. By
default OpenMP's threads spin between parallel regions (``OMP_WAIT_POLICY`` ACTIVE), so whenever
another process holds a core they burn CPU waiting for one that is not running: the same scoring
then costs 4-9x the CPU seconds on a shared machine. Passive waiting must be in the environment
before libgomp loads (it reads it once, at load); the thread count can be set later.

Library entries (``scoring.RewardModel``, ``serving.trl.RewardFunction``) run in a user's own
process and leave its settings alone: a user calls ``use_cpu_threads()`` first to get ours.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from stash_pipeline.core.errors import InputError

THREADS_ENV = "STASH_TORCH_THREADS"
# Passive waiting for GNU OpenMP (torch's wheels) and Intel's (a conda or oneAPI build). An explicit
# value in the environment is kept.
WAIT_POLICY = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}
# Our code runs one operation at a time (no torch.jit.fork): an operation's own threads are the
# intra-op ones, and inter-op threads would only multiply them.
INTER_OP_THREADS = 1
CGROUP_ROOT = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")
OPENMP_LIBRARIES = ("libgomp", "libiomp", "libomp")


@dataclass(frozen=True)
class CpuThreads:
    intra_op: int
    inter_op: int
    reason: str  # where intra_op came from, in words
    wait_policy: str  # OMP_WAIT_POLICY as OpenMP read it, when it was in time
    in_time: bool = True  # False: OpenMP was loaded before the choice, with its own wait policy

    def describe(self) -> str:
        waits = (f"OpenMP waits {self.wait_policy.lower()}" if self.in_time else
                 "OpenMP was loaded before the threads were chosen and waits as it started")
        return (f"torch threads: {self.intra_op} intra-op ({self.reason}), {self.inter_op} "
                f"inter-op; {waits}")


def cpu_quota(cgroup_root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP) -> float | None:
    """The CPUs per period the process's cgroup and those above it allow (cgroup v2 ``cpu.max``,
    v1 ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``), the smallest of them; None when none
    limits it or nothing can be read."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":
            for folder in _ancestors(cgroup_root, path):
                quotas += _quota(folder / "cpu.max", None)
        elif "cpu" in controllers.split(","):
            mount = cgroup_root / controllers
            for folder in _ancestors(mount if mount.is_dir() else cgroup_root / "cpu", path):
                quotas += _quota(folder / "cpu.cfs_quota_us", folder / "cpu.cfs_period_us")
    return min(quotas) if quotas else None


def _ancestors(root: Path, path: str) -> Iterator[Path]:
    """The cgroup's folder under ``root`` and each folder above it, up to ``root``. Inside a
    container the mount's root is often the container's own cgroup, whatever the path says."""
    parts = [part for part in path.split("/") if part]
    for end in range(len(parts), -1, -1):
        folder = root.joinpath(*parts[:end])
        if folder.is_dir():
            yield folder


def _quota(limit: Path, period: Path | None) -> list[float]:
    try:
        if period is None:  # v2: "max 100000" or "150000 100000"
            allowed, _, per = limit.read_text().strip().partition(" ")
        else:
            allowed, per = limit.read_text().strip(), period.read_text().strip()
        if allowed in ("max", "-1"):
            return []
        return [int(allowed) / int(per)]
    except (OSError, ValueError, ZeroDivisionError):
        return []


def cores_available(affinity: set[int] | None = None,
                    quota: float | None = None) -> tuple[int, str]:
    """Threads for the cores this process may use: its CPU affinity, capped by a cgroup CPU quota
    (whole CPUs of it, at least one: a thread beyond the quota would be throttled mid-region)."""
    cores = len(os.sched_getaffinity(0) if affinity is None else affinity) or 1
    if quota is not None and math.floor(quota) < cores:
        return max(1, math.floor(quota)), f"a CPU quota of {quota:g} of {cores} cores"
    return cores, f"the {cores} core{'s' if cores > 1 else ''} this process may use"


def choose_threads(environ: MutableMapping[str, str] | None = None, *,
                   affinity: set[int] | None = None, quota: float | None = None) -> CpuThreads:
    """``STASH_TORCH_THREADS`` if set; else an explicit ``OMP_NUM_THREADS`` (its first level);
    else the cores this process may use (``cores_available``). Pure apart from reading the
    process's affinity and cgroup when they are not given."""
    environ = os.environ if environ is None else environ
    policy = environ.get("OMP_WAIT_POLICY", WAIT_POLICY["OMP_WAIT_POLICY"]).upper()
    setting = environ.get(THREADS_ENV, "").strip()
    if setting:
        if not setting.isdigit() or int(setting) < 1:
            raise InputError(f"{THREADS_ENV} must be a positive integer (the CPU threads torch "
                             f"runs), not {setting!r}; unset it to use the cores this process "
                             "may use")
        return CpuThreads(int(setting), INTER_OP_THREADS, THREADS_ENV, policy)
    explicit = environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if explicit.isdigit() and int(explicit) >= 1:
        return CpuThreads(int(explicit), INTER_OP_THREADS, "OMP_NUM_THREADS", policy)
    count, reason = cores_available(affinity, cpu_quota() if quota is None else quota)
    return CpuThreads(count, INTER_OP_THREADS, reason, policy)


def openmp_loaded() -> bool:
    """Whether an OpenMP runtime is mapped into this process already (it read its environment
    then)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "torch" in sys.modules
    return any(name in maps for name in OPENMP_LIBRARIES)


def use_cpu_threads() -> CpuThreads:
    """Choose this process's threads (``choose_threads``), put passive waiting in the environment
    (kept for the processes it starts) before torch loads OpenMP, then import torch and set its
    intra-op and inter-op threads. Idempotent; a process whose torch already ran parallel work
    keeps its inter-op threads."""
    choice = choose_threads(os.environ)
    in_time = not openmp_loaded()
    for name, value in WAIT_POLICY.items():
        os.environ.setdefault(name, value)
    import torch

    torch.set_num_threads(choice.intra_op)
    if torch.get_num_interop_threads() != choice.inter_op:
        try:
            torch.set_num_interop_threads(choice.inter_op)
        except RuntimeError:  # parallel work already started, or set once: it stays as it is
            pass
    return CpuThreads(choice.intra_op, torch.get_num_interop_threads(), choice.reason,
                      choice.wait_policy, in_time)
