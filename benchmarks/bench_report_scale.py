"""How long `matrixbench report` takes on a run of the default matrix's size (the readers' side).

The run: matrix.yaml's 11 models x batch sizes 1/4/16 x eager/default/reduce-overhead x its 4 images x ``--repeats``
processes (3 by default: 1,188 records), each with ``--samples`` timed calls (300, as matrix.yaml), written through
the runner's own record builder (tests/fixtures/make_fixtures.py's helpers). The latencies are SYNTHETIC round
numbers with a fixed noise pattern (the run's note says so): this measures the report's code, not a GPU. Then
`matrixbench report` (Markdown, HTML, charts, CSV) runs on it, timed, with its peak memory (ru_maxrss of the child).

    python benchmarks/bench_report_scale.py [--repeats 3] [--samples 300] [--models 11] [--out benchmarks/results]

Writes ``report_scale.json`` and ``.md`` with the machine and its load.
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "fixtures"))

import make_fixtures as fx  # noqa: E402

from benchmarks.machine import write_results  # noqa: E402
from runner import records  # noqa: E402
from runner.cells_file import cells_file_from_dict  # noqa: E402
from runner.core import Status  # noqa: E402
from runner.schema import write_record  # noqa: E402
from runner.timing import summarize  # noqa: E402

MODE_FACTOR = {"eager": 1.0, "default": 0.8, "reduce-overhead": 0.5}
BATCH_FACTOR = {1: 1.0, 4: 2.0, 16: 6.0}
IMAGE_FACTOR = {"seed": 1.0, "stable": 1.0, "nightly": 0.95, "latest": 0.9}


def write_run(run_dir: Path, models: dict, repeats: int, samples: int) -> int:
    """The run folder of ``models`` (name -> {id, task}) x the default matrix's axes; returns the records written."""
    matrix = yaml.safe_load((REPO / "matrix.yaml").read_text())
    images = list(matrix["images"])
    fx._reset(run_dir, images, "SYNTHETIC run for benchmarks/bench_report_scale.py: round made-up latencies; no "
                               "GPU measured them.")
    settings = dict(fx.SETTINGS, iterations=samples)
    z = np.random.default_rng(0).standard_normal(samples)
    noise = (z - z.mean()) / z.std(ddof=1)
    written = 0
    for image in images:
        versions = fx.GPU_IMAGES["nightly" if image == "nightly" else "stable"]
        environment = fx._environment(image, versions, fx.GPU)
        cells = [{"model": name, "model_id": spec["id"], "task": spec["task"], "weights": "random", "size": "full",
                  "batch_size": batch, "mode": mode, "fullgraph": False, "dtype": "float32"}
                 for name, spec in models.items() for batch in BATCH_FACTOR for mode in MODE_FACTOR]
        plan = cells_file_from_dict({"settings": settings, "image_name": image, "cells": cells})
        for index, cell in enumerate(plan.cells):
            for repeat in range(repeats):
                job = {"cell": cell, "settings": plan.settings, "device": "cuda", "precision": fx.PRECISION,
                       "environment": environment, "started_at": "2024-11-02T10:00:00+00:00", "start_clock": 0.0,
                       "repeat": repeat}
                record = records.new_record(job)
                mean = (10.0 + index % 7) * BATCH_FACTOR[cell.batch_size] * MODE_FACTOR[cell.mode] \
                    * IMAGE_FACTOR[image] * (1.0 + 0.01 * (repeat - 1))
                record.status = Status.OK
                record.timing = {"load_s": 2.0, "first_call_s": 1.0, "warmup_s": 1.0, "timer": "cuda_event",
                                 **summarize([round(float(v), 4) for v in mean * (1.0 + 0.02 * noise)],
                                             record.settings["cv_threshold"])}
                record.memory = {"peak_bytes": 1 << 30, "kind": "cuda_max_allocated"}
                record.dynamo = None if cell.mode == "eager" else fx._dynamo("vit")
                record.accuracy = fx._accuracy((image, cell.model, cell.batch_size, cell.mode),
                                               record.settings["accuracy_tolerance"])
                record.duration_s = 20.0
                write_record(run_dir / image, record)
                written += 1
    return written


def markdown(result):
    return "\n".join([
        "# `matrixbench report` on a run of the default matrix's size", "",
        f"{result['records']} SYNTHETIC records ({result['models']} models x batch 1/4/16 x eager/default/"
        f"reduce-overhead x 4 images x {result['repeats']} processes, {result['samples']} calls each), written in "
        f"{result['write_s']:.0f} s.", "",
        f"`matrixbench report`: exit {result['report_exit']} in **{result['report_s']:.1f} s**, peak RSS "
        f"{result['report_peak_rss_mib']:.0f} MiB, {result['files']} files. Load average "
        f"{result['load_average'][0]:.1f} before, {result['load_after'][0]:.1f} after; machine: "
        f"{result['machine'].get('Model name', '?')}, {result['machine'].get('CPU(s)', '?')} CPUs.",
        ""])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--models", type=int, default=11, help="the first N of matrix.yaml's models")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    parser.add_argument("--name", default="report_scale")
    args = parser.parse_args(argv)
    models = dict(list(yaml.safe_load((REPO / "matrix.yaml").read_text())["models"].items())[:args.models])
    load_before, begun = os.getloadavg(), time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "results" / "scale"
        started = time.monotonic()
        count = write_run(run_dir, models, args.repeats, args.samples)
        write_s = time.monotonic() - started
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "matrixbench.cli", "report", str(run_dir), "--out",
                               str(Path(tmp) / "report")], cwd=REPO, capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))
        report_s = time.monotonic() - started
        peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        files = sorted(p.relative_to(Path(tmp) / "report").as_posix() for p in (Path(tmp) / "report").rglob("*")
                       if p.is_file())
    result = {"records": count, "models": len(models), "repeats": args.repeats, "samples": args.samples,
              "write_s": write_s, "report_s": report_s, "report_exit": done.returncode,
              "report_peak_rss_mib": peak_mib, "files": len(files), "load_before": load_before,
              "load_after": os.getloadavg(), "stderr_tail": done.stderr[-2000:]}
    write_results(Path(args.out), args.name, result, markdown, load=load_before, started=begun)
    return 0 if done.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
