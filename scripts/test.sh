#!/usr/bin/env bash
# Set up .venv with the test extras and run the whole test suite on pytest-xdist workers, one more
# than the cores (a quarter of the tests' time is waiting on timeouts, servers and processes: the
# extra worker runs meanwhile). A module's tests stay on one worker, so its module fixtures are
# built once; the modules are dealt longest first (stash_pipeline_tests/support/module_order.py).
# Arguments go to pytest after these: `-n 0` runs in this one process.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/venv.sh test
# Python's default, which this machine's environment turns off: cache compiled modules. Without
# it each pytest process rewrites the assertions of its plugins' 360 modules again (about 5 s
# each), and each process the suite starts compiles the project's own modules again.
unset PYTHONDONTWRITEBYTECODE
workers=$(( $(nproc) + 1 ))
pytest=(.venv/bin/python -m pytest -n "$workers" --dist loadscope --no-loadscope-reorder "$@")
# The tests' scratch (pytest's tmp_path and every file the tests and the processes they start put
# in TMPDIR: SQLite stores, Dagster's event logs, checkpoints) lives in memory when /dev/shm has
# room for it (a run writes about 0.9 GB): on a disk each SQLite commit waits for its fsync and
# each file's creation costs about 1 ms, together a fifth of the suite's time. A TMPDIR of your
# own is kept. A failed run's scratch stays for a look, as pytest's own does; a passing run's goes.
shm_free_kb="$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $4}')"
if [ -z "${TMPDIR:-}" ] && [ "${shm_free_kb:-0}" -gt $((4 * 1024 * 1024)) ]; then
  scratch="$(mktemp -d /dev/shm/stash-pipeline-tests.XXXXXX)"
  chmod 0755 "$scratch"  # as /tmp: a test's own PostgreSQL server runs as another user
  status=0
  TMPDIR="$scratch" "${pytest[@]}" || status=$?
  if [ "$status" -eq 0 ]; then
    rm -rf "$scratch"
  else
    echo "The tests' scratch is kept in memory at $scratch: rm -rf it when done." >&2
  fi
  exit "$status"
fi
exec "${pytest[@]}"
