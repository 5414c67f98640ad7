#!/usr/bin/env bash
# Create (or reuse) .venv in the project root and install the project into it.
# Re-installs only when pyproject.toml changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."
# The extras to install (pyproject.toml): `worker` (the ML stack) by default, `test` (which holds it).
extras="${1:-worker}"
python="${PYTHON:-python3}"
# The interpreter's own pip puts uv into the venv, which then needs no pip of its own to start
# (ensurepip costs 3 s); uv installs pip with the project, so `.venv/bin/python -m pip` works as
# in any venv. Without a pip outside, the venv gets its own to do it.
if [ ! -x .venv/bin/python ]; then
  if "$python" -m pip --version >/dev/null 2>&1; then
    "$python" -m venv --without-pip .venv
  else
    "$python" -m venv .venv
  fi
fi
stamp=".venv/.installed${extras:+-$extras}"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # uv installs what pip resolves (the same versions, as pip picks: the best match of every
  # index) in a tenth of pip's minute. It does not read pip's configuration, so this machine's
  # wheel folders (torch 2.13.0's CPU build among them), indexes, constraints and CA bundle are
  # handed over.
  pip=(.venv/bin/python -m pip)
  "${pip[@]}" --version >/dev/null 2>&1 || pip=("$python" -m pip --python .venv/bin/python)
  "${pip[@]}" install --quiet "uv==0.13.9"
  uv_args=(--python .venv/bin/python --index-strategy unsafe-best-match)
  while IFS='=' read -r key value; do
    value="${value#\'}"
    value="${value%\'}"
    case "${key##*.}" in
      find-links) flag=--find-links ;;
      index-url) flag=--index-url ;;
      extra-index-url) flag=--extra-index-url ;;
      constraint) flag=--constraints ;;
      cert) export SSL_CERT_FILE="$value"; continue ;;
      *) continue ;;
    esac
    for item in $value; do uv_args+=("$flag" "$item"); done
  done < <("${pip[@]}" config list)
  .venv/bin/uv pip install --quiet "${uv_args[@]}" -e ".${extras:+[$extras]}" pip
  # Bytecode for what the project imports, not for every installed file (the script says why).
  .venv/bin/python scripts/compile_imports.py
  echo "$want" > "$stamp"
fi
