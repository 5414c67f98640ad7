#!/usr/bin/env bash
# Set up .venv and run the main job on the embedded default: SQLite and a local checkpoint
# directory under STASH_HOME (default ./.stash), on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/venv.sh
export STASH_HOME="${STASH_HOME:-$PWD/.stash}"
.venv/bin/stash-pipeline import stash_pipeline/samples
.venv/bin/stash-pipeline traces list
