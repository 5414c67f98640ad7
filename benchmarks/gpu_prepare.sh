#!/usr/bin/env bash
# Run HERE (a machine that reaches PyPI), before the GPU run: fills .gpu/ (ignored by git) with
# what the GPU host lacks, for the device tool's `carry: [".gpu"]` (64 MiB at most):
#   .gpu/data/     the three data files the suite reads (about 5 MB)
#   .gpu/wheels/   wheels for the host's Python (default 3.12, manylinux x86_64) of every package
#                  the suite imports that the host's stock PyTorch image lacks or has at another
#                  version: the project's pinned transformers (the image has 5.17, which the
#                  worker refuses) and the safetensors it needs, TRL and datasets for the
#                  baseline, dagster-pipes and ijson for the worker and importers; each at the
#                  version this checkout's venv runs, so the GPU runs the stack the tests ran.
#   .gpu/versions.txt  what was carried (name==version), one a line
# gpu_suite.sh installs all of them with `pip install --no-index --no-deps --target` into a
# folder put ahead of the image's packages on PYTHONPATH; torch, numpy, pyarrow, pandas,
# tokenizers, huggingface_hub and accelerate are the image's own.
set -euo pipefail
cd "$(dirname "$0")/.."
data="${1:-../shared/data}"
python_version="${GPU_PYTHON_VERSION:-3.12}"
venv=.venv/bin/python
carried=(transformers safetensors trl datasets dill multiprocess xxhash dagster-pipes ijson)
rm -rf .gpu
mkdir -p .gpu/data/agentprocessbench .gpu/data/tau2-bench/runs .gpu/data/hh-rlhf .gpu/wheels
cp "$data/agentprocessbench/hotpotqa.jsonl" .gpu/data/agentprocessbench/
cp "$data/tau2-bench/runs/airline_gpt-4o_azure.json" .gpu/data/tau2-bench/runs/
cp "$data/hh-rlhf/harmless-base-dev.jsonl.gz" .gpu/data/hh-rlhf/
"$venv" - "${carried[@]}" > .gpu/versions.txt <<'EOF'
import sys
from importlib import metadata
for name in sys.argv[1:]:
    print(f"{name}=={metadata.version(name)}")
EOF
"$venv" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$python_version" \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d .gpu/wheels -r .gpu/versions.txt
cat .gpu/versions.txt
du -sh .gpu .gpu/data .gpu/wheels
total=$(du -sb .gpu | cut -f1)
if [ "$total" -gt $((64 * 1024 * 1024)) ]; then
  echo "over the 64 MiB carry limit" >&2
  exit 1
fi
