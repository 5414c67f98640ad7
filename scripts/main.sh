#!/usr/bin/env bash
# The main job on the embedded default (SQLite and a local checkpoint directory under STASH_HOME,
# default ./.stash, on the CPU, no network): import the sample traces with their ratings, build a
# tiny random base model (or take --base-model ID_OR_PATH), train a personal reward model through
# the pipeline's sensor and run, then print its metrics and its top- and bottom-scored traces.
set -euo pipefail
cd "$(dirname "$0")/.."
base_model=""
while [ $# -gt 0 ]; do
  case "$1" in
    --base-model) base_model="$2"; shift 2 ;;
    *) echo "usage: scripts/main.sh [--base-model HF_ID_OR_PATH]" >&2; exit 2 ;;
  esac
done
scripts/venv.sh
export STASH_HOME="${STASH_HOME:-$PWD/.stash}"
# No network here: train on the ratings alone. With ANTHROPIC_API_KEY set, STASH_EXTRACTION=on
# also extracts comments, corrections and automatic assessment.
export STASH_EXTRACTION="${STASH_EXTRACTION:-off}"
cli=.venv/bin/stash-pipeline

$cli import stash_pipeline/samples
if [ -z "$base_model" ]; then
  base_model="$STASH_HOME/tiny-qwen3"
  [ -f "$base_model/config.json" ] || .venv/bin/python -m stash_pipeline.worker.tiny_model "$base_model"
  echo "Training on a tiny random base model: the pipeline is real, the model is a toy."
  echo "Use --base-model Qwen/Qwen3-0.6B (or a local path) for a real one."
fi
model_id=$($cli rm create --name samples --all-traces --base-model "$base_model" --wait --json \
  | tail -n 1 | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["id"])')
$cli rm show "$model_id"
