#!/usr/bin/env bash
# The main job on the embedded default (SQLite and a local checkpoint directory under STASH_HOME,
# default ./.stash, on the CPU, no network): import the sample traces with their ratings and the
# shared samples (another account's opted-in contributions), build a tiny random base model (or
# take --base-model ID_OR_PATH), train a personal reward model through the pipeline's sensor and
# run and print its metrics and top- and bottom-scored traces; then train a shared-evaluator
# candidate, let the release gate release it, score every trace with it, and print one trace with
# its shared and personal action credit and where to open it in the trace viewer.
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
# STASH_HOME as a newcomer has it: unset, the documented default ./.stash (here the project root's).
home="${STASH_HOME:-.stash}"
# No network here: train on the ratings alone. With ANTHROPIC_API_KEY set, STASH_EXTRACTION=on
# also extracts comments, corrections and automatic assessment.
export STASH_EXTRACTION="${STASH_EXTRACTION:-off}"
cli=.venv/bin/stash-pipeline

$cli import stash_pipeline/samples
# Learnable contributions of another account (ana), opted in to shared-evaluator training, with
# step ratings and independently reviewed comparisons: the shared evaluator's data and benchmark.
$cli import stash_pipeline/samples/shared --owner ana --contribute
if [ -z "$base_model" ]; then
  base_model="$home/tiny-qwen3"
  [ -f "$base_model/config.json" ] || .venv/bin/python -m stash_pipeline.worker.tiny_model \
    "$base_model" stash_pipeline/samples/*.jsonl stash_pipeline/samples/shared/*.jsonl
  echo "Training on a tiny random base model: the pipeline is real, the model is a toy."
  echo "Use --base-model Qwen/Qwen3-0.6B (or a local path) for a real one."
fi
model_id=$($cli rm create --name samples --all-traces --base-model "$base_model" --wait --json \
  | tail -n 1 | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["id"])')
$cli rm show "$model_id"

echo
echo "== The shared evaluator: a candidate from opted-in contributions, benchmarked on separate"
echo "== traces and released only if the gate passes; then it scores every trace's actions."
$cli evaluator train --base-model "$base_model" --epochs 3 --wait
$cli evaluator score-pending --wait
trace=6f1d2c3a-0b1e-4c8e-9a51-1a2b3c4d5e01
echo
echo "== One trace with its action credit: column 1 is the shared evaluator's, column 2 yours."
$cli traces show "$trace"
key=$($cli accounts key local --json | tail -n 1 \
  | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["api_key"])')
echo
echo "Open it in the trace viewer: run \`$cli api\`, then http://127.0.0.1:8000/ui/traces/$trace"
echo "and log in with the API key $key (a new key of the account local; the old one stops working)."
