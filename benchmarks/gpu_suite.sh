#!/usr/bin/env bash
# The GPU benchmarks of issue 11, in one script, for a session that has a GPU.
#
# Here first: benchmarks/gpu_prepare.sh (fills .gpu/ with the data and the wheels the host lacks).
# Then with the device tool, from the repository root, in two calls of under 10 minutes each:
#   run(command="benchmarks/gpu_suite.sh memory training", carry=[".gpu"], timeout_s=600)
#   run(command="benchmarks/gpu_suite.sh scoring job", carry=[".gpu"], timeout_s=600)
# (all four steps in one call need about 9 minutes; "compile" and "prompts" are optional steps).
# Each step writes $OUT/<step>.txt; $OUT/summary.txt collects their `name: value` lines.
# Built base models and installed packages stay in $GPU_CACHE (default /tmp/stash-gpu) while the
# machine stays warm, so a second call does not build or install them again.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/gpu-suite-out}"
cache="${GPU_CACHE:-/tmp/stash-gpu}"
site="$cache/site"
mkdir -p "$out" "$site" "$cache/models"
export PYTHONPATH="$PWD:$PWD/benchmarks:$site${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
py="${PYTHON:-python3}"
data=.gpu/data
[ -d "$data" ] || data=../shared/data

# --- install only what this host cannot import, from the carried .gpu/ ---------------------
missing() { ! "$py" -c "import $1" 2>/dev/null; }
if { missing pyarrow || missing pandas; } && [ -f .gpu/pyarrow-pandas.tar.xz ]; then
  tar -C "$site" -xJf .gpu/pyarrow-pandas.tar.xz
fi
# module=wheel name prefix, dependencies first
for pair in six=six dateutil=python_dateutil psutil=psutil dill=dill multiprocess=multiprocess \
            xxhash=xxhash ijson=ijson dagster_pipes=dagster_pipes accelerate=accelerate datasets=datasets trl=trl; do
  module="${pair%%=*}"; wheel="${pair#*=}"
  if missing "$module"; then
    ls .gpu/wheels/"$wheel"-*.whl >/dev/null 2>&1 \
      && "$py" -m pip install --quiet --no-index --no-deps --target "$site" .gpu/wheels/"$wheel"-*.whl
  fi
done
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$py" -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.version.cuda)"
  echo "cores: $(nproc)"
  for module in pyarrow pandas datasets trl accelerate dagster_pipes ijson; do
    if missing "$module"; then echo "$module: MISSING"; else echo "$module: $("$py" -c "import $module; print(getattr($module, '__version__', 'present'))")"; fi
  done
} > "$out/environment.txt" 2>&1
cat "$out/environment.txt"

# --- the steps ---------------------------------------------------------------------------------
common=(--device cuda --model qwen3-0.6b-shape --data "$data" --cache "$cache/models")
step() {  # step NAME LIMIT_SECONDS COMMAND...
  local name="$1" limit="$2"; shift 2
  local started=$SECONDS
  timeout "$limit" "$py" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - started)) s" | tee -a "$out/summary.txt"
  grep -E '^[a-z0-9_]+: ' "$out/$name.txt" | tee -a "$out/summary.txt"
}
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(memory training scoring job)
for name in "${steps[@]}"; do
  case "$name" in
    memory)   step memory 240 benchmarks/train_memory.py --device cuda --model qwen3-0.6b-shape ;;
    # Ours (with and without the last-layer read: readout_gain) against TRL, and a profile.
    training) step training 420 benchmarks/train_throughput.py "${common[@]}" --pairs 200 --repeats 2 \
                --readout-gain --profile "$out/profile" ;;
    scoring)  step scoring 300 benchmarks/action_scoring.py "${common[@]}" --readout-gain ;;
    job)      step job 420 benchmarks/worker_job.py "${common[@]}" ;;
    compile)  step compile 420 benchmarks/train_throughput.py "${common[@]}" --pairs 200 --repeats 1 --trl off --compile ;;
    # Shared prompts as tree rows (masked attention) against apart (the causal kernel), hh-rlhf.
    prompts)  step prompts 300 benchmarks/shared_prompts.py "${common[@]}" --pairs 256 --repeats 3 ;;
    *) echo "unknown step $name (memory, training, scoring, job, compile, prompts)" ;;
  esac
done
