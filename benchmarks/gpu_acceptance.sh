#!/bin/sh
# The GPU acceptance run (docs/gpu.md): on a machine with one NVIDIA GPU and a preinstalled torch, no
# Docker, no network, in about 20 minutes:
#   1. matrixbench selftest (the measuring apparatus on this GPU),
#   2. the full-size seed models at batch size 1 in eager, default and reduce-overhead with the local
#      backend, repeats 3, and the report,
#   3. the harness-vs-plain-loop benchmark on the GPU (resnet and vit, eager and default),
# with the machine (nvidia-smi, load) written beside them under benchmarks/results/gpu/<gpu>-<date>/.
#
# Usage: benchmarks/gpu_acceptance.sh [--dry-run]
#   --dry-run  check the GPU and write the matrix, print every command, run none (tests use it)
# Environment:
#   PYTHON  the interpreter with the preinstalled torch (default python3)
#   WHEELS  folder of wheels for the project's missing pure-Python dependencies (default .whl)
#   OUT     results folder (default benchmarks/results/gpu/<gpu>-<yyyymmdd>)
#   ITERATIONS  timed calls per cell (default 100: the 20-minute budget; matrix.yaml uses 300)
set -eu
cd "$(dirname "$0")/.."
dry=no
[ "${1:-}" = --dry-run ] && dry=yes
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
ITERATIONS=${ITERATIONS:-100}

run() {
  echo "+ $*"
  [ $dry = yes ] || "$@"
}

gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true)
count=$(printf '%s\n' "$gpus" | grep -c . || true)
if [ "$count" != 1 ]; then
  echo "gpu_acceptance.sh: needs exactly one NVIDIA GPU; nvidia-smi lists $count (set CUDA_VISIBLE_DEVICES" \
       "and run on a one-GPU machine, or install the driver)" >&2
  exit 2
fi
slug=$(printf '%s' "$gpus" | tr -cs 'A-Za-z0-9' '-' | sed 's/^-//; s/-$//')
OUT=${OUT:-benchmarks/results/gpu/$slug-$(date -u +%Y%m%d)}
versions=$("$PYTHON" -c 'import sys, torch, transformers
print(torch.__version__.split("+")[0], transformers.__version__, "%d.%d" % sys.version_info[:2])') || {
  echo "gpu_acceptance.sh: $PYTHON lacks torch or transformers; set PYTHON to the interpreter with the" \
       "preinstalled torch (and put a transformers wheel in $WHEELS)" >&2
  exit 2
}
set -- $versions
torch=$1 transformers=$2 python=$3
mkdir -p "$OUT"
venv="$OUT/.venv"
mb="$venv/bin/python -m matrixbench.cli"

# The matrix: the seed models at full size, batch size 1, the three seed modes, this torch as image "latest".
cat > "$OUT/acceptance.yaml" <<EOF
# Written by benchmarks/gpu_acceptance.sh: the preinstalled torch $torch as image "latest".
images:
  latest:
    description: "The machine's preinstalled torch $torch (the local backend)."
    torch: "torch==$torch"
    python: "$python"
    transformers: "transformers==$transformers"
$(sed -n '/^weights:/,/^# size:/p' matrix.yaml | sed '$d')
size: full
batch_sizes: [1]
modes: [eager, default, reduce-overhead]
dtypes: [float32]
repeats: 3
iterations: $ITERATIONS
warmup: 10
timeout_s: 900
EOF

echo "gpu_acceptance.sh: $gpus, torch $torch ($PYTHON), results in $OUT"
# The project in a venv that sees the preinstalled torch; missing pure-Python dependencies from $WHEELS.
run "$PYTHON" -m venv --system-site-packages "$venv"
run "$venv/bin/python" -m pip install --no-index --find-links "$WHEELS" --quiet -e .
{ nvidia-smi; nvidia-smi -q -d CLOCK,POWER,PERFORMANCE; echo; uptime; echo "torch $torch ($PYTHON)"; } \
  > "$OUT/machine.txt" 2>&1 || true
run $mb selftest --results "$OUT" --run acceptance --python "$venv/bin/python" --device cuda
run $mb run --matrix "$OUT/acceptance.yaml" --backend local --device cuda --results "$OUT" --run acceptance \
  --note "benchmarks/gpu_acceptance.sh on $gpus"
run $mb report "$OUT/acceptance" --out "$OUT/report"
run "$venv/bin/python" benchmarks/bench_harness_vs_plain.py --device cuda --models resnet,vit \
  --modes eager,default --rounds 5 --budget-s 300 --out "$OUT"
uptime >> "$OUT/machine.txt"
echo "gpu_acceptance.sh: done; commit $OUT (without .venv) with its machine.txt"
