"""CPU seconds of scoring as a user's machine pays them: every process of the path, over its
forwards alone, with torch's default threads against ours, quiet and beside one busy process.

The embedded default as ``scripts/main.sh`` leaves it (SQLite, local compute, the CPU, a tiny
released shared evaluator trained on the packaged samples: ``import_to_scored.py``'s). For each
measurement ``--traces`` real tau2-bench airline traces (``../shared/data``) are imported under
fresh ids, then scored by one of the two paths a user has:

  wait    ``stash-pipeline evaluator score-pending --wait`` (the command, its run in its own
          process and the worker it starts), from the command's start to its end
  daemon  ``stash-pipeline dev`` (webserver, daemon, code server) already running and idle: from
          the import to the last trace's scores visible in the store (the ``pending_scoring``
          sensor's tick, its runs, their workers)

CPU seconds are every process the path runs, children included: this process is a child
subreaper (orphans are reaped here too), and a process tree's seconds are its live processes'
own and reaped children's (``/proc``) plus the children reaped here. Each path runs with

  default  torch's own choice: its intra-op threads (the physical cores), libgomp's default
           spinning (``GOMP_SPINCOUNT=300000``, what it does with ``OMP_WAIT_POLICY`` unset)
  ours     ``worker/threads.use_cpu_threads`` as every worker process runs it (passive waiting,
           threads from the cores the process may use; docs/worker.md, "CPU threads")

quiet, then with a busy process (``while True: pass``, not counted) on one core. The baseline is the
forwards alone on the same rows: a process that loads the released checkpoint, plans the traces'
rows as the scorer does (``scoring.plan_trace_rows``) and reads them (``batching.read_rows``),
timed around the second of two reads (the first warms allocations up), under the same threads
and load. ``..._over_forwards`` is a path's CPU seconds over those forwards';
``..._over_quiet_ours_forwards`` over the forwards' work itself (quiet, our threads: torch's
default spins in the forwards alone too, which flatters a ratio over them). The machine's other
load is not ours to control: the load average is printed beside each figure.

    .venv/bin/python benchmarks/user_path_scoring.py [--traces 40] [--runs 10]
        [--paths wait,daemon] [--threads default,ours] [--loads quiet,busy] [--repeats 1]
        [--more-traces 0] [--data DIR]

``--more-traces N`` measures each path at N traces too: a trace more then costs
``..._marginal_over_forwards`` times its forwards, and each command or import
``..._fixed_cpu_s`` whatever the traces, from the line through both counts.

Last line ``ours_busy_path_over_forwards: N`` (the worst condition's headline, ours;
``ours_quiet_...`` when only quiet was measured).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

from import_to_scored import configure, release_tiny_evaluator

# Not models.DEFAULT_DATA: models.py imports torch, and the forwards' own process must choose its
# threads before torch loads OpenMP (else it spins as torch's default does, whatever the choice).
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

CLI = Path(sys.executable).with_name("stash-pipeline")
OWNER = "bench"
POLL_S = 0.5
PR_SET_CHILD_SUBREAPER = 36
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# libgomp's spin count when OMP_WAIT_POLICY is unset (env.c: "3 msec blocking when
# OMP_WAIT_POLICY is not specified"); GOMP_SPINCOUNT wins over the wait policy that
# use_cpu_threads puts in the environment, so the default condition spins as plain torch does.
LIBGOMP_DEFAULT_SPIN = "300000"
THREAD_VARIABLES = ("STASH_TORCH_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "OMP_WAIT_POLICY", "KMP_BLOCKTIME", "GOMP_SPINCOUNT")


def become_subreaper() -> None:
    """Orphaned descendants (a run's worker whose parent went first) are reparented to this
    process, so their CPU seconds are reaped here rather than by init."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap_orphans(keep: set[int]) -> None:
    """Reap every exited child that no Popen here waits for (the orphans this subreaper got)."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid in keep:
            return
        os.waitpid(info.si_pid, 0)


def _stat(pid: str) -> tuple[int, float, float] | None:
    """A process's parent, its own CPU seconds, and those with its reaped children's."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    own = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return int(fields[1]), own, own + (int(fields[13]) + int(fields[14])) / CLOCK_TICKS


def descendants(exclude: set[int]) -> dict[int, tuple[float, float]]:
    """{pid: (own CPU seconds, with its reaped children's)} of every live descendant of this
    process, less the ``exclude`` processes' trees (the busy process)."""
    stats = {int(pid): s for pid in os.listdir("/proc") if pid.isdigit()
             if (s := _stat(pid)) is not None}
    me, found = os.getpid(), {}
    for pid, (_, own, with_children) in stats.items():
        chain, seen = pid, 0
        while chain not in (me, 0, 1) and chain not in exclude and seen < 64:
            chain, seen = stats.get(chain, (0, 0.0, 0.0))[0], seen + 1
        if chain == me and pid != me and pid not in exclude:
            found[pid] = (own, with_children)
    return found


def tree_cpu_seconds(exclude: set[int]) -> float:
    """CPU seconds of every descendant of this process (live ones from /proc, reaped ones from
    getrusage), less the ``exclude`` processes' trees (the busy process)."""
    import resource

    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (sum(total for _, total in descendants(exclude).values())
            + reaped.ru_utime + reaped.ru_stime)


# Where a process's CPU seconds go in the breakdown, by the first pattern its command line holds.
ROLES = (("stash_pipeline.worker.resident", "resident worker"),
         ("stash_pipeline.worker", "worker"),
         ("watch_orphans", "compute-log watchers"),
         ("run_forker", "run processes"), ("execute_run", "run processes"),
         ("evaluator score-pending", "the command"),
         ("dagster-daemon", "daemon"), ("dagster._daemon", "daemon"),
         ("webserver", "webserver"), ("grpc", "code server"), ("code-server", "code server"),
         ("api_grpc", "code server"), ("stash-pipeline dev", "dev"), ("dagster dev", "dev"))


def role(pid: int) -> str:
    try:
        line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "other"
    return next((name for pattern, name in ROLES if pattern in line), "other")


class RoleSampler(threading.Thread):
    """Every ``interval`` s, each descendant's own CPU seconds (not its children's) by its role
    (``ROLES``): where a path's seconds go. A process that ends between two looks loses what it
    used since the last one, so the roles add up to a little less than the exact total."""

    def __init__(self, exclude: set[int], interval: float = 0.1):
        super().__init__(daemon=True)
        self.exclude, self.interval = exclude, interval
        self.first: dict[int, float] = {}
        self.last: dict[int, tuple[str, float]] = {}
        self.stop = threading.Event()
        self._look(initial=True)

    def _look(self, initial: bool = False) -> None:
        for pid, (own, _) in descendants(self.exclude).items():
            if initial:
                self.first[pid] = own
            self.first.setdefault(pid, 0.0)
            known = self.last.get(pid)
            self.last[pid] = (known[0] if known and known[0] != "other" else role(pid), own)

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            self._look()

    def seconds(self) -> dict[str, float]:
        self.stop.set()
        self.join()
        self._look()
        out: dict[str, float] = {}
        for pid, (name, own) in self.last.items():
            out[name] = out.get(name, 0.0) + own - self.first.get(pid, 0.0)
        return dict(sorted(out.items(), key=lambda item: -item[1]))


def thread_environment(choice: str, default_threads: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    if choice == "default":
        env.update(STASH_TORCH_THREADS=str(default_threads), GOMP_SPINCOUNT=LIBGOMP_DEFAULT_SPIN)
    return env


def torch_default_threads() -> int:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                         env=env, capture_output=True, text=True, check=True).stdout
    return int(out.strip())


def import_fresh(store, records: list, count: int) -> list[str]:
    """``count`` of the airline traces under fresh ids (without feedback); their ids."""
    fresh = [replace(r, trace=replace(r.trace, id=str(uuid.uuid4())), feedback=())
             for r in records[:count]]
    store.import_traces(fresh)
    return [r.trace.id for r in fresh]


def pending(store) -> int:
    from stash_pipeline.cli.evaluator import queue_counts

    return queue_counts(store)["pending"]


def wait_path(store, records, count, env, exclude) -> tuple[float, dict[str, float]]:
    import_fresh(store, records, count)
    sampler = RoleSampler(exclude)
    sampler.start()
    before = tree_cpu_seconds(exclude)
    done = subprocess.run([str(CLI), "evaluator", "score-pending", "--wait"], env=env,
                          capture_output=True, text=True)
    reap_orphans(exclude)
    if done.returncode != 0 or pending(store):
        raise SystemExit(f"score-pending --wait failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return tree_cpu_seconds(exclude) - before, sampler.seconds()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def until_idle(exclude: set[int], *, window_s: float = 5.0, at_most: float = 0.25,
               timeout: float = 600.0) -> None:
    """Until the process tree has used at most ``at_most`` CPU seconds a second over
    ``window_s`` (started, first ticks done)."""
    started = time.monotonic()
    last = tree_cpu_seconds(exclude)
    while time.monotonic() - started < timeout:
        time.sleep(window_s)
        now = tree_cpu_seconds(exclude)
        if now - last <= at_most * window_s:
            return
        last = now
    raise SystemExit(f"the daemon's processes were still busy after {timeout:.0f} s")


def daemon_path(store, records, count, env, exclude, home: Path,
                timeout: float) -> tuple[float, dict[str, float]]:
    log = (home / f"dev-{uuid.uuid4().hex[:6]}.log").open("w")
    dev = subprocess.Popen([str(CLI), "dev", "--port", str(free_port())], env=env, stdout=log,
                           stderr=subprocess.STDOUT, start_new_session=True)
    try:
        until_idle(exclude)
        sampler = RoleSampler(exclude)
        sampler.start()
        before = tree_cpu_seconds(exclude)
        import_fresh(store, records, count)
        started = time.monotonic()
        while pending(store):
            if time.monotonic() - started > timeout:
                raise SystemExit(f"{count} traces not scored within {timeout:.0f} s; see "
                                 f"{log.name}")
            time.sleep(POLL_S)
        return tree_cpu_seconds(exclude) - before, sampler.seconds()
    finally:
        os.killpg(dev.pid, signal.SIGINT)
        try:
            dev.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait()
        reap_orphans(exclude)


def forwards_cpu_seconds(home: Path, ids: list[str], env: dict[str, str]) -> float:
    """The forwards alone on the rows the scorer plans for ``ids``, in a process of their own
    under ``env``'s threads: their CPU seconds."""
    spec = home / "forwards.json"
    spec.write_text(json.dumps({"ids": ids, "archive": str(home / "release-job")}))
    out = subprocess.run([sys.executable, __file__, "--forwards-of", str(spec)], env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    return float(out.stdout.strip().splitlines()[-1])


def forwards_only(spec_path: Path) -> None:
    from stash_pipeline.worker.threads import use_cpu_threads

    use_cpu_threads()  # as the worker does; the environment decides (default or ours)
    from stash_pipeline.compute.contract import ARCHIVE_NAME
    from stash_pipeline.store import Store
    from stash_pipeline.worker.batching import read_rows
    from stash_pipeline.worker.checkpoint import open_checkpoint
    from stash_pipeline.worker.modeling import scoring_precision
    from stash_pipeline.worker.readout import pools_last_token
    from stash_pipeline.worker.scoring import plan_trace_rows

    spec = json.loads(spec_path.read_text())
    store = Store(os.environ["DATABASE_URL"])
    with open_checkpoint(Path(spec["archive"]) / ARCHIVE_NAME) as saved:
        model, tokenizer = saved.load_model(device="cpu")
    plan = plan_trace_rows(tokenizer, store.get_traces(spec["ids"]), "shared", whole=True,
                           actions=True, one_pass=pools_last_token(model))
    with scoring_precision("auto", "cpu"):
        read_rows(model, plan.rows, pad_id=tokenizer.pad_token_id)  # warm-up: first allocations
        started = time.process_time()
        read_rows(model, plan.rows, pad_id=tokenizer.pad_token_id)
    print(time.process_time() - started)


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f}, n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--runs", type=int, default=10, help="airline result files read")
    parser.add_argument("--traces", type=int, default=40, help="traces a measurement scores")
    parser.add_argument("--more-traces", type=int, default=0,
                        help="also measure each path at this many traces: the cost of a trace "
                             "more (over its forwards') and the fixed cost of a command or an "
                             "import, from the line through both")
    parser.add_argument("--paths", default="wait,daemon")
    parser.add_argument("--threads", default="default,ours")
    parser.add_argument("--loads", default="quiet,busy")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--forwards-of", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.forwards_of:
        return forwards_only(args.forwards_of)
    become_subreaper()
    # As in an activated venv: the run launcher starts each run's process as `dagster` from PATH.
    os.environ["PATH"] = os.pathsep.join([str(CLI.parent), os.environ.get("PATH", "")])
    home = Path(tempfile.mkdtemp(prefix="user-path-scoring-"))
    configure(home)
    from stash_pipeline.importers import read_path
    from stash_pipeline.store import Store

    store = Store(os.environ["DATABASE_URL"])
    store.migrate()
    store.create_account(OWNER)
    release_tiny_evaluator(home, store)
    files = sorted((args.data / "tau2-bench" / "runs").glob("airline_*.json"))[:args.runs]
    records = [r for f in files for r in read_path(f, format="tau2", owner=OWNER)]
    records = [r for r in records if r.trace.actions()]
    default_threads = torch_default_threads()
    counts = sorted({args.traces, *([args.more_traces] if args.more_traces else [])})
    sample = import_fresh(store, records, counts[-1])  # the forwards' rows; scored as a warm-up
    subprocess.run([str(CLI), "evaluator", "score-pending", "--wait"], capture_output=True,
                   check=True)
    reap_orphans(set())
    for count in counts:
        actions = sum(len(t.actions()) for t in store.get_traces(sample[:count]))
        print(f"{count} airline traces ({actions} actions) a measurement; torch's default "
              f"threads {default_threads}; {os.cpu_count()} CPUs", flush=True)
    figures: dict[str, list[float]] = {}
    lines: dict[tuple[str, str], dict[int, tuple[float, float]]] = {}
    for load in args.loads.split(","):
        busy = (subprocess.Popen([sys.executable, "-c", "while True: pass"])
                if load == "busy" else None)
        exclude = {busy.pid} if busy else set()
        try:
            for repeat in range(args.repeats):
                for choice, count in ((c, n) for c in args.threads.split(",") for n in counts):
                    env = thread_environment(choice, default_threads)
                    forwards = forwards_cpu_seconds(home, sample[:count], env)
                    for path in args.paths.split(","):
                        load_average = os.getloadavg()[0]
                        started = time.monotonic()
                        cpu, roles = (wait_path(store, records, count, env, exclude)
                                      if path == "wait" else
                                      daemon_path(store, records, count, env, exclude, home,
                                                  args.timeout))
                        wall = time.monotonic() - started
                        key = f"{choice}_{load}"
                        if count == args.traces:
                            figures.setdefault(f"{key}_{path}_cpu_s", []).append(cpu)
                            figures.setdefault(f"{key}_{path}_over_forwards", []).append(
                                cpu / forwards)
                            figures.setdefault(f"{key}_forwards_cpu_s", []).append(forwards)
                        lines.setdefault((key, path), {})[count] = (cpu, forwards)
                        print(f"{load}, {choice} threads, {path}, {count} traces: {cpu:.1f} "
                              f"CPU-s ({wall:.0f} s wall) against forwards alone "
                              f"{forwards:.1f} CPU-s: {cpu / forwards:.2f}x; load average "
                              f"{load_average:.1f}", flush=True)
                        print("  by process: " + ", ".join(f"{name} {seconds:.1f}"
                                                           for name, seconds in roles.items()
                                                           if seconds >= 0.05), flush=True)
        finally:
            if busy:
                busy.kill()
                busy.wait()
    # The forwards' work itself: quiet, with our threads (torch's default spins in the forwards
    # alone too, which flatters a ratio over them).
    work = statistics.median(figures.get("ours_quiet_forwards_cpu_s")
                             or figures.get("ours_busy_forwards_cpu_s", [math.nan]))
    for name, values in list(figures.items()):
        if name.endswith("_cpu_s") and "forwards" not in name:
            figures[name.replace("_cpu_s", "_over_quiet_ours_forwards")] = [v / work
                                                                             for v in values]
    # Through the first and last count of each condition (the last repeat's): a trace more costs
    # ``marginal`` times its forwards, and each command or import ``fixed`` CPU-s whatever the
    # traces (interpreters, Dagster, the checkpoint's load, the daemon meanwhile).
    for (key, path), points in lines.items():
        if len(points) > 1:
            (cpu_a, fwd_a), (cpu_b, fwd_b) = points[min(points)], points[max(points)]
            marginal = (cpu_b - cpu_a) / (fwd_b - fwd_a)
            figures[f"{key}_{path}_marginal_over_forwards"] = [marginal]
            figures[f"{key}_{path}_fixed_cpu_s"] = [cpu_a - marginal * fwd_a]
    for name, values in figures.items():
        print(f"{name}: {spread(values)}")
    condition = "ours_busy_" if "busy" in args.loads.split(",") else "ours_quiet_"
    worst = max(statistics.median(v) for k, v in figures.items()
                if k.startswith(condition) and k.endswith("_over_forwards")
                and not k.endswith("_marginal_over_forwards"))
    print(f"{condition}path_over_forwards: {worst:.2f}")


if __name__ == "__main__":
    main()
