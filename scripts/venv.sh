#!/usr/bin/env bash
# Create (or reuse) .venv in the project root and install the project into it.
# Re-installs only when pyproject.toml changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$python" -m venv .venv
stamp=".venv/.installed${extras:+-$extras}"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # uv installs what pip resolves (the same versions, as pip picks: the best match of every
  # index) in a tenth of pip's minute. It does not read pip's configuration, so this machine's
  # wheel folders (torch 2.13.0's CPU build among them), indexes, constraints and CA bundle are
  # handed over. Bytecode is compiled as pip does: a process then imports without compiling.
  .venv/bin/python -m pip install --quiet "uv==0.13.9"
  uv_args=(--python .venv/bin/python --index-strategy unsafe-best-match --compile-bytecode)
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
  done < <(.venv/bin/python -m pip config list)
  .venv/bin/uv pip install --quiet "${uv_args[@]}" -e ".${extras:+[$extras]}"
  echo "$want" > "$stamp"
fi
