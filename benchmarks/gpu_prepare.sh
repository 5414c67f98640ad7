#!/usr/bin/env bash
# Run HERE, before a session that has a GPU: fills .gpu/ (ignored by git) with what the GPU
# machine lacks, to be carried there with the device tool's `carry: [".gpu"]` (64 MiB at most):
#   .gpu/data/              the three data files the benchmarks read (about 5 MB)
#   .gpu/wheels/            small pure or manylinux wheels for the GPU host's Python (default 3.12):
#                           datasets, trl, accelerate, dagster-pipes, ijson and their small deps
#   .gpu/pyarrow-pandas.tar.xz  pyarrow and pandas unpacked, tests and headers dropped, xz-packed
#                           (their wheels are 67 MB, over the carry limit); skip with WITH_PYARROW=0
# gpu_suite.sh installs from these only what the GPU host cannot import.
set -euo pipefail
cd "$(dirname "$0")/.."
data="${1:-../shared/data}"
python_version="${GPU_PYTHON_VERSION:-3.12}"
pip=(.venv/bin/python -m pip download --quiet --no-deps --only-binary=:all: --python-version "$python_version"
     --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64
     --platform manylinux_2_24_x86_64)
rm -rf .gpu
mkdir -p .gpu/data/agentprocessbench .gpu/data/tau2-bench/runs .gpu/data/hh-rlhf .gpu/wheels
cp "$data/agentprocessbench/hotpotqa.jsonl" .gpu/data/agentprocessbench/
cp "$data/tau2-bench/runs/airline_gpt-4o_azure.json" .gpu/data/tau2-bench/runs/
cp "$data/hh-rlhf/harmless-base-dev.jsonl.gz" .gpu/data/hh-rlhf/
# The project's pins where it has them (pyproject.toml); the rest as the CPU venv has them.
"${pip[@]}" -d .gpu/wheels "datasets==4.7.0" "trl==1.16.0" "accelerate==1.15.0" "dagster-pipes==1.13.27" \
  "ijson==3.6.0" "dill==0.4.0" "multiprocess==0.70.18" "xxhash==4.1.0" "python-dateutil==2.9.0.post0" \
  "six==1.17.0" "psutil==7.2.2"
if [ "${WITH_PYARROW:-1}" = 1 ]; then
  scratch="$(mktemp -d)"
  "${pip[@]}" -d "$scratch/wheels" "pyarrow==21.0.0" "pandas==2.3.3"
  mkdir "$scratch/site"
  for wheel in "$scratch"/wheels/*.whl; do (cd "$scratch/site" && unzip -q -o "$wheel"); done
  rm -rf "$scratch"/site/pyarrow/include "$scratch"/site/pyarrow/src "$scratch"/site/pyarrow/tests \
         "$scratch"/site/pandas/tests
  find "$scratch/site" \( -name '*.pxd' -o -name '*.pyx' -o -name '*.pxi' -o -name '*.h' -o -name '*.cc' \) -delete
  tar -C "$scratch/site" -cf - . | xz -6 -T0 > .gpu/pyarrow-pandas.tar.xz
  rm -rf "$scratch"
fi
du -sh .gpu .gpu/* | sort -k2
total=$(du -sb .gpu | cut -f1)
if [ "$total" -gt $((64 * 1024 * 1024)) ]; then
  echo "over the 64 MiB carry limit: set WITH_PYARROW=0 if the GPU host has pyarrow and pandas" >&2
  exit 1
fi
