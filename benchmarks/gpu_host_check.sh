#!/usr/bin/env bash
# Issue 32 on a GPU, one short command: python -m runner on ResNet-50 eager and reduce-overhead at batch 1
# (the launch-bound and the CUDA-graph case) with timing.host, timing.paired, timing.extended; the records
# and a summary land in $OUT (or ./gpu-host-check). Needs torch and transformers only (the runner's stdlib).
# Then issue 32's noise probe on the device (runner.noise_probe: a CPU loop, a small launch-bound chain, its
# CUDA-graph replay) and issue 34's A/A experiment: two ResNet-50 eager processes taking turns
# (benchmarks/bench_cross_process.py, scipy too): does the host's state cancel between two processes alive at once?
# Rehearse it on a CPU: DEVICE=cpu CROSS_SIZE=tiny CROSS_ROUNDS=2 CROSS_CORES=1 ITERATIONS=20 bash benchmarks/gpu_host_check.sh
set -u
OUT=${OUT:-./gpu-host-check}
mkdir -p "$OUT/records"
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"
PYTHONPATH=$PWD timeout "${RUNNER_TIMEOUT:-300}" $PY -m runner --out "$OUT/records" --models resnet \
    --modes eager,reduce-overhead --iterations "${ITERATIONS:-300}" --warmup 10 --device "$DEVICE" 2>&1 | tail -n 20
PYTHONPATH=$PWD $PY - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
summary = []
for path in sorted((out / "records").glob("*.json")):
    record = json.loads(path.read_text())
    if "cell" not in record:
        continue
    timing = record.get("timing") or {}
    host = {k: v for k, v in (timing.get("host") or {}).items() if k != "launch_samples_ms"}
    extended = {k: v for k, v in (timing.get("extended") or {}).items() if k != "extra_samples_ms"}
    paired = timing.get("paired")
    row = {"record": path.name, "status": record["status"], "error": record.get("error"),
           "mean_ms": timing.get("mean_ms"), "median_ms": timing.get("median_ms"), "host": host,
           "extended": extended, "energy": timing.get("energy"), "flags": timing.get("flags"),
           "paired": paired and {k: v for k, v in paired.items() if k != "pairs"},
           "pairs": paired and paired["pairs"]}
    summary.append(row)
    print(json.dumps(row, indent=1, default=str)[:3000])
(out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
PY
# Issue 34: does the host's state cancel between two processes taking turns (runner.baton)? An A/A pair of
# ResNet-50 eager processes at batch 1, own loops one after the other against blocks in turns, 8 rounds.
PYTHONPATH=$PWD timeout "${PROBE_TIMEOUT:-120}" $PY -m runner.noise_probe --device "$DEVICE" \
    --out "$OUT/noise_probe.json" 2>&1 | tail -n 5
PYTHONPATH=$PWD $PY - "$OUT/noise_probe.json" <<'PY'
import json, sys
def short(value):     # the probe's figures without its per-call lists
    if isinstance(value, dict):
        return {k: short(v) for k, v in value.items() if not (isinstance(v, list) and len(v) > 12)}
    return value
try:
    print(json.dumps(short(json.load(open(sys.argv[1]))), indent=1)[:4000])
except (OSError, ValueError) as exc:
    print("no noise probe result:", exc)
PY
# both workers pinned to the same cores (a level that comes from where a process runs is then shared: on the
# development CPU pinning took the paired rounds' SD from 0.12 to 0.05, 0.03 under load), then free to run anywhere
# One torch thread a worker: more threads than pinned cores stall (the waiting side's OpenMP threads spin).
for pin in "${CROSS_CORES:-2,3}" ""; do
    PYTHONPATH=$PWD timeout "${CROSS_TIMEOUT:-240}" $PY benchmarks/bench_cross_process.py --device "$DEVICE" \
        --size "${CROSS_SIZE:-full}" --model resnet --mode eager --rounds "${CROSS_ROUNDS:-6}" --threads 1 \
        --cores "$pin" --out "$OUT" --name "cross_process_${DEVICE}${pin:+_pinned}" 2>&1 | tail -n 25
done
