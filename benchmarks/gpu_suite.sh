#!/usr/bin/env bash
# Every GPU figure of docs/worker.md and docs/serving.md in one run of at most SUITE_SECONDS
# (default 480 s), for the device tool. Here first: benchmarks/gpu_prepare.sh (fills .gpu/).
# Then, from the repository root:
#   run(command="benchmarks/gpu_suite.sh", carry=[".gpu"], timeout_s=540)
# Steps, most important first, each given what is left of the budget (at most its own limit), so
# a slow step never costs the ones after it more than their share:
#   memory    train_memory.py: peak of a step at the seed's worst case, today's path and ours
#   training  train_throughput.py: ours against TRL's RewardTrainer, MFU, peak memory, a
#             torch.profiler trace ($OUT/profile/)
#   job       worker_job.py: the whole worker job sized to fit, job_over_compute and
#             a10g_minutes_estimate for 4000 pairs plus 1,000 traces
#   scoring   action_scoring.py: ours against the naive scorer, bf16 agreement
#   best_of_n best_of_n.py: reranking candidates through the scoring server's engine, latency
#             p50/p95 and the shared-prompt gain (docs/serving.md)
#   compile   train_throughput.py --compile: torch.compile of the fast decoder's layer
# Each step writes $OUT/<step>.txt as it runs (unbuffered); every `name: value` line also goes to
# $OUT/summary.txt the moment the step ends, so a run cut short keeps what it measured.
# `benchmarks/gpu_suite.sh memory training` runs some steps only.
# DRY_RUN=1: the same steps and code on this CPU with the tiny model and tiny sizes (a check that
# the suite runs end to end before the GPU is spent on it).
set -uo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
budget="${SUITE_SECONDS:-480}"
# A dry run on a (shared, slow) CPU gets the same steps with limits this many times longer.
slow=1
[ "${DRY_RUN:-0}" = 1 ] && { slow="${DRY_RUN_SLOWDOWN:-10}"; budget="${SUITE_SECONDS:-4000}"; }
out="${OUT:-/tmp/gpu-suite-out}"
cache="${GPU_CACHE:-/tmp/stash-gpu}"
site="$cache/site"
mkdir -p "$out" "$site" "$cache/models"
py="${PYTHON:-python3}"
[ -x .venv/bin/python ] && [ "${DRY_RUN:-0}" = 1 ] && py="${PYTHON:-.venv/bin/python}"
data=.gpu/data
[ -d "$data" ] || data=../shared/data
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1

# --- the carried packages, ahead of the host's own ---------------------------------------------
if [ -d .gpu/wheels ] && [ "${DRY_RUN:-0}" != 1 ]; then
  "$py" -m pip install --quiet --no-index --no-deps --target "$site" --upgrade .gpu/wheels/*.whl \
    2>&1 | grep -v "^WARNING: Target directory" | tail -3
fi
export PYTHONPATH="$site:$PWD:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
    || echo "no GPU"
  "$py" -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'from', transformers.__file__, 'cuda', torch.version.cuda)"
  echo "cores: $(nproc)"
  [ -f .gpu/versions.txt ] && echo "carried: $(tr '\n' ' ' < .gpu/versions.txt)"
  # The worker's own check: it refuses to run on this stack if this fails.
  "$py" -c "from stash_pipeline.worker.stack import check_stack; print('worker stack check:', check_stack())"
} > "$out/environment.txt" 2>&1
cat "$out/environment.txt"

# --- the steps -----------------------------------------------------------------------------------
if [ "${DRY_RUN:-0}" = 1 ]; then
  device=cpu model=tiny pairs=12 repeats=1 job=(--max-pairs 12 --traces 4 --naive-traces 2)
  scoring=(--traces 2 --repeats 1) memory=(--model tiny) best=(--models tiny --repeats 2 --requests 2)
else
  device=cuda model=qwen3-0.6b-shape pairs=160 repeats=2
  job=(--max-pairs 320 --traces 60 --naive-traces 8) scoring=(--traces 6 --repeats 2) memory=()
  best=(--models qwen3-0.6b-shape)
fi
common=(--device "$device" --model "$model" --data "$data" --cache "$cache/models")
step() {  # step NAME LIMIT_SECONDS COMMAND...: at most LIMIT, and never past the budget
  local name="$1" limit=$(($2 * slow)); shift 2
  local left=$((budget - (SECONDS - started)))
  [ "$left" -lt "$limit" ] && limit="$left"
  if [ "$limit" -lt 20 ]; then
    echo "== $name: skipped, $left s of the budget left" | tee -a "$out/summary.txt"
    return
  fi
  local begun=$SECONDS
  timeout --kill-after=5 "$limit" "$py" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - begun)) s (limit $limit s)" | tee -a "$out/summary.txt"
  grep -E '^[a-z0-9_]+: ' "$out/$name.txt" | tee -a "$out/summary.txt"
  [ "$rc" = 0 ] || tail -5 "$out/$name.txt"
}
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(memory training layers job scoring best_of_n compile)
for name in "${steps[@]}"; do
  case "$name" in
    memory)   step memory 75 benchmarks/train_memory.py --device "$device" "${memory[@]}" ;;
    training) step training 170 benchmarks/train_throughput.py "${common[@]}" --pairs "$pairs" \
                --repeats "$repeats" --profile "$out/profile" ;;
    # The per-device layer choices (decoder.AUTOGRAD_LAYER_DEVICES, LAST_LAYER_AT_READS_DEVICES).
    layers)   step layers 150 benchmarks/train_throughput.py "${common[@]}" --pairs "$pairs" \
                --repeats 1 --trl off --compare-layers --compare-last-layer ;;
    job)      step job 120 benchmarks/worker_job.py "${common[@]}" "${job[@]}" ;;
    scoring)  step scoring 60 benchmarks/action_scoring.py "${common[@]}" "${scoring[@]}" ;;
    best_of_n) step best_of_n 60 benchmarks/best_of_n.py --device "$device" "${best[@]}" ;;
    compile)  step compile 150 benchmarks/train_throughput.py "${common[@]}" --pairs "$pairs" \
                --repeats 1 --trl off --compile ;;
    *) echo "unknown step $name (memory, training, layers, job, scoring, best_of_n, compile)" ;;
  esac
done
echo "suite: $((SECONDS - started)) s" | tee -a "$out/summary.txt"
