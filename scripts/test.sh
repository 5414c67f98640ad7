#!/usr/bin/env bash
# Set up .venv with the test extras and run the whole test suite, one pytest-xdist worker per core
# (a module's tests stay on one worker, so its module fixtures are built once).
# Arguments go to pytest after these: `-n 0` runs in this one process.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/venv.sh test
exec .venv/bin/python -m pytest -n auto --dist loadscope "$@"
