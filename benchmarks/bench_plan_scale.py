"""How long `matrixbench run --dry-run` takes to plan a matrix of about 100k processes (issue 24).

The matrix: the CPU smoke matrix's models (vit, resnet, segformer, detr-resnet-101) and its two
images, batch sizes 1-128, 4 modes, 3 dtypes, ``repeats: 5`` (2 x 4 x 128 x 4 x 3 x 5 = 61,440
processes); by default two copies of `latest` join them (4 images: 122,880); ``--scale`` multiplies the batch sizes.
Half of one image's processes get records first (``--recorded``) so resume reads records too.
Writes ``results/plan_scale.json`` and ``.md``. Target: a few seconds, linear in the processes
(it was 145 s for 7,680 processes per image before planning was made linear).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import contention, describe, lscpu  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"


def matrix_data(images, batch_sizes):
    smoke = yaml.safe_load((REPO / "matrix-cpu-smoke.yaml").read_text())
    chosen = dict(list(smoke["images"].items())[:2])
    for index in range(2, images):
        chosen[f"copy{index}"] = dict(smoke["images"]["latest"], description=f"copy {index}")
    return {**smoke, "images": chosen, "batch_sizes": list(range(1, batch_sizes + 1)),
            "modes": ["eager", "default", "reduce-overhead", "max-autotune"],
            "dtypes": ["float32", "float16", "bfloat16"], "repeats": 5}


def timed(argv, cwd):
    started = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed, done.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--batch-sizes", type=int, default=128)
    args = parser.parse_args()
    data = matrix_data(args.images, args.batch_sizes)
    processes = (len(data["images"]) * len(data["models"]) * len(data["batch_sizes"]) * len(data["modes"])
                 * len(data["dtypes"]) * data["repeats"])
    cli = [sys.executable, "-c", "from matrixbench.cli import main; main()"]
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "matrix.yaml").write_text(yaml.safe_dump(data))
        validate_s, _ = timed([*cli, "validate"], folder)
        dry_s, out = timed([*cli, "run", "--dry-run", "--backend", "local", "--device", "cpu"], folder)
    result = {"processes": processes, "validate_s": round(validate_s, 2), "dry_run_s": round(dry_s, 2),
              "lines": out.count("\n"), "load_before": load_before, "load_after": os.getloadavg(),
              "contention": contention(), "machine": lscpu(),
              "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "plan_scale.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    table = ("| processes | validate | run --dry-run | load before | load after |\n| --- | --- | --- | --- | --- |\n"
             f"| {processes:,} | {validate_s:.1f} s | {dry_s:.1f} s | "
             f"{' '.join(f'{x:.2f}' for x in load_before)} | {' '.join(f'{x:.2f}' for x in result['load_after'])} |\n")
    (RESULTS / "plan_scale.md").write_text(f"# run --dry-run at scale ({result['at']})\n\n{table}\n"
                                           f"{describe(result['machine'])}\n")
    print(table)


if __name__ == "__main__":
    main()
