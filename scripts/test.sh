#!/usr/bin/env bash
# Set up .venv with the test extras and run the whole test suite, one pytest-xdist worker per core
# (a module's tests stay on one worker, so its module fixtures are built once).
# Arguments go to pytest after these: `-n 0` runs in this one process.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/venv.sh test
# Python's default, which this machine's environment turns off: cache compiled modules. Without
# it each pytest process rewrites the assertions of its plugins' 360 modules again (about 5 s
# each), and each process the suite starts compiles the project's own modules again.
unset PYTHONDONTWRITEBYTECODE
exec .venv/bin/python -m pytest -n auto --dist loadscope "$@"
