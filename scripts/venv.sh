#!/usr/bin/env bash
# Create (or reuse) .venv in the project root and install the project into it.
# Re-installs only when pyproject.toml changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
stamp=".venv/.installed${extras:+-$extras}"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # torch is pinned to 2.13.0, the CPU build this machine keeps on disk.
  .venv/bin/python -m pip install --quiet -e ".${extras:+[$extras]}"
  echo "$want" > "$stamp"
fi
