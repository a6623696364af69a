#!/bin/sh
# The GPU acceptance run (docs/gpu.md), sized to one short GPU slot: on a machine with one NVIDIA GPU and
# a preinstalled torch, no Docker, no network, in one command of at most 8 minutes (BUDGET_S, default 420 s
# of work after the set-up):
#   1. matrixbench selftest (the measuring apparatus on this GPU),
#   1b. issue 34's A/A through the product, in turns pinned to TURNS_PIN cores (default 1), the default design
#      since the 2026-11-28 H200 run (benchmarks/bench_turns_aa.py: `run --aa latest` on TURNS_AA, default resnet,
#      eager, TURNS_REPEATS rounds, default 10; TURNS_DESIGNS, default pinned; add turns (unpinned) or plain (one
#      after the other) to compare, the most telling first, should the budget cut the step short; TURNS_AA= skips
#      it): the rounds' mean log ratio (a true 0) and SD check the default on this GPU (docs/turns.md);
#      each of its runs starts with the noise check (issue 32's probe on the GPU, run/noise_check.json),
#   2. the full-size seed models MODELS (default resnet,vit) at batch size 1 in eager, default and
#      reduce-overhead with the local backend, REPEATS (default 2) processes a cell, and the report,
#   3. the harness-vs-plain-loop benchmark on the GPU (resnet eager: the launch-bound cell),
# with the machine (nvidia-smi, load) written beside them under RESULTS. Each step runs under `timeout`
# with what is left of the budget; a step that failed or was cut short is listed in RESULTS/steps-not-ok.txt,
# one the budget left no time for in RESULTS/not-reached.txt, and the run's
# SIGTERM keeps every finished record. What this slot does not reach: detr-resnet-101 and the other seed
# models (MODELS=... in a longer slot), batch sizes above 1, max-autotune.
#
# Usage: benchmarks/gpu_acceptance.sh [--dry-run]
#   --dry-run  check the GPU and write the matrix, print every command, run none (tests use it)
# Environment:
#   PYTHON   the interpreter with the preinstalled torch (default python3)
#   WHEELS   folder of wheels for the project's missing pure-Python dependencies (default .whl); they are
#            unpacked into a folder on PYTHONPATH (no venv, no build backend needed)
#   RESULTS  results folder (default benchmarks/results/gpu/<gpu>-<yyyymmdd>)
#   TAR      if set, a .tar.gz of RESULTS is written there at the end (one file to bring back)
#   MODELS, REPEATS, ITERATIONS (default 300, as matrix.yaml), BUDGET_S
#   DEVICE   cuda (default), or cpu: a rehearsal of the same steps on a machine without a GPU (no GPU check;
#            the numbers say nothing about a GPU, the time says whether the steps fit the budget)
set -eu
cd "$(dirname "$0")/.."
dry=no
[ "${1:-}" = --dry-run ] && dry=yes
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
ITERATIONS=${ITERATIONS:-300}
MODELS=${MODELS:-resnet,vit}
REPEATS=${REPEATS:-2}
BUDGET_S=${BUDGET_S:-420}
started=$(date +%s)

left() { echo $((BUDGET_S - ($(date +%s) - started))); }
run() {
  echo "+ $*"
  [ $dry = yes ] && return 0
  share=$(left)
  if [ "$share" -le 10 ]; then echo "not reached (budget spent): $*" >> "$RESULTS/not-reached.txt"; return 0; fi
  timeout -s TERM -k 20 "$share" "$@" || {
    rc=$?; what=failed; [ $rc = 124 ] && what="cut short by the budget"
    echo "$what (exit $rc) after $(( $(date +%s) - started )) s: $*" >> "$RESULTS/steps-not-ok.txt"; }
}

DEVICE=${DEVICE:-cuda}
if [ "$DEVICE" = cpu ]; then gpus="cpu rehearsal" count=1
else
  gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true)
  count=$(printf '%s\n' "$gpus" | grep -c . || true)
fi
if [ "$count" != 1 ]; then
  echo "gpu_acceptance.sh: needs exactly one NVIDIA GPU; nvidia-smi lists $count (set CUDA_VISIBLE_DEVICES" \
       "and run on a one-GPU machine, or install the driver)" >&2
  exit 2
fi
slug=$(printf '%s' "$gpus" | tr -cs 'A-Za-z0-9' '-' | sed 's/^-//; s/-$//')
RESULTS=${RESULTS:-benchmarks/results/gpu/$slug-$(date -u +%Y%m%d)}
versions=$("$PYTHON" -c 'import sys, torch, transformers
print(torch.__version__.split("+")[0], transformers.__version__, "%d.%d" % sys.version_info[:2])') || {
  echo "gpu_acceptance.sh: $PYTHON lacks torch or transformers; set PYTHON to the interpreter with the" \
       "preinstalled torch (and put a transformers wheel in $WHEELS)" >&2
  exit 2
}
set -- $versions
torch=$1 transformers=$2 python=$3
mkdir -p "$RESULTS"
: > "$RESULTS/not-reached.txt"; : > "$RESULTS/steps-not-ok.txt"
site="${TMPDIR:-/tmp}/matrixbench-site"
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mb="$PYTHON -m matrixbench.cli"

# The matrix: the seed models at full size, batch size 1, the three seed modes, this torch as image "latest".
cat > "$RESULTS/acceptance.yaml" <<EOF
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
repeats: $REPEATS
iterations: $ITERATIONS
warmup: 10
timeout_s: 900
EOF

echo "gpu_acceptance.sh: $gpus, torch $torch ($PYTHON), models $MODELS, repeats $REPEATS, results in $RESULTS"
# The missing pure-Python dependencies from $WHEELS, unpacked beside the preinstalled packages.
run "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
  "$WHEELS"/*.whl
{ [ "$DEVICE" = cpu ] || { nvidia-smi; nvidia-smi -q -d CLOCK,POWER,PERFORMANCE; }; lscpu; echo; uptime; nproc; echo "torch $torch ($PYTHON)"; } \
  > "$RESULTS/machine.txt" 2>&1 || true
run $mb selftest --results "$RESULTS" --run acceptance --python "$PYTHON" --device "$DEVICE"
[ -n "${TURNS_AA-resnet}" ] && run "$PYTHON" benchmarks/bench_turns_aa.py --matrix "$RESULTS/acceptance.yaml" \
  --image latest --models "${TURNS_AA-resnet}" --modes eager --repeats "${TURNS_REPEATS:-10}" \
  --iterations "$ITERATIONS" --device "$DEVICE" --backend local --results "$RESULTS" --out "$RESULTS" --name turns_aa \
  --designs "${TURNS_DESIGNS:-pinned}" --pin "${TURNS_PIN:-1}"
run $mb run --matrix "$RESULTS/acceptance.yaml" --backend local --device "$DEVICE" --results "$RESULTS" \
  --run acceptance --models "$MODELS" --note "benchmarks/gpu_acceptance.sh on $gpus"
run $mb report "$RESULTS/acceptance" --out "$RESULTS/report"
run "$PYTHON" benchmarks/bench_harness_vs_plain.py --device "$DEVICE" --models resnet --modes eager \
  --iterations "$ITERATIONS" --rounds 5 --budget-s 60 --out "$RESULTS"
[ $dry = yes ] && exit 0
uptime >> "$RESULTS/machine.txt"
echo "gpu_acceptance.sh: done in $(( $(date +%s) - started )) s; not reached: $(wc -l < "$RESULTS/not-reached.txt"), failed or cut short: $(wc -l < "$RESULTS/steps-not-ok.txt")"
if [ -n "${TAR:-}" ]; then tar -czf "$TAR" -C "$(dirname "$RESULTS")" "$(basename "$RESULTS")"; fi
