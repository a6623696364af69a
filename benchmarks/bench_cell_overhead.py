"""Per-cell fixed cost: process start to the first timed iteration, compile excluded.

A cell's process is forked from the preloaded forkserver (runner.isolation). This
measures, for full-size ViT with random weights on CPU, from the parent's fork request
to the first timed iteration, minus the first call (first_call_s) and the warm-up: the
cost every cell pays before it measures anything. Target: <= 2 s on the 2-core machine.

    python benchmarks/bench_cell_overhead.py [--repeats 5] [--mode eager] [--out benchmarks/results]

Writes <out>/cell_overhead.json and .md with the machine it ran on.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runner import records  # noqa: E402
from runner.cells_file import cells_file_from_dict  # noqa: E402
from runner.driver import make_job, probe  # noqa: E402
from runner.isolation import Launcher  # noqa: E402


def vit_cell(mode):
    return {"model": "vit", "model_id": "google/vit-base-patch16-224", "config_path": None,
            "task": "image-classification", "weights": "random", "size": "full", "batch_size": 1,
            "mode": mode, "fullgraph": False, "dtype": "float32"}


def measure_once(launcher, plan, context, cache_dir):
    """One cell in a fresh process: its phase times (s) and the environment it recorded."""
    with tempfile.TemporaryDirectory() as out_dir, tempfile.TemporaryDirectory() as scratch:
        job = make_job(plan.cells[0], plan, context, out_dir, scratch, cache_dir)
        outcome = launcher.run("run_job", (job,), plan.settings["timeout_s"])
        record = json.loads(next(Path(out_dir).glob("*.json")).read_text())
    if record["status"] != "ok":
        raise SystemExit(f"cell failed: {record['error']}")
    marks, start, timing = outcome.reply["marks"], job["start_clock"], record["timing"]
    to_first_timed = marks["first_timed_iteration"] - start
    phases = {
        "fork_to_child": marks["process_started"] - start,
        "child_to_build": marks["build"] - marks["process_started"],
        "build": timing["load_s"],
        "accuracy_reference": marks["first_call"] - marks["build"] - timing["load_s"],
        "first_call": timing["first_call_s"],
        "warmup": timing["warmup_s"],
        "start_to_first_timed_iteration": to_first_timed,
        "fixed_cost": to_first_timed - timing["first_call_s"] - timing["warmup_s"],
    }
    return phases, record["environment"]


def machine(environment):
    return {"cpu_model": environment["cpu_model"], "cores": os.cpu_count(), "torch": environment["torch"],
            "transformers": environment["transformers"], "python": environment["python"],
            "threads": environment["threads"], "load_average_at_end": os.getloadavg()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mode", default="eager", help="eager, or a compiled mode (compiles warm from a shared cache)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args()
    plan = cells_file_from_dict({"settings": {"iterations": 3, "warmup": 3, "device": "cpu"},
                           "cells": [vit_cell(args.mode)]})
    launcher = Launcher()
    started = time.monotonic()
    launcher.start()
    context = probe(launcher, plan)
    startup_s = time.monotonic() - started
    with tempfile.TemporaryDirectory() as cache_dir:
        # The first cell warms the compile cache and the page cache; it is not counted.
        runs = [measure_once(launcher, plan, context, cache_dir) for _ in range(args.repeats + 1)]
    report = summarize([phases for phases, _ in runs[1:]], startup_s, args, machine(runs[-1][1]))
    write(report, Path(args.out), f"cell_overhead_{args.mode}")


def summarize(runs, startup_s, args, info):
    keys = list(runs[0])
    return {
        "benchmark": "cell_overhead", "model": "vit (full, random weights)", "mode": args.mode,
        "device": "cpu", "repeats": len(runs), "target_s": 2.0,
        "one_time_startup_s": startup_s,
        "median_s": {key: statistics.median(run[key] for run in runs) for key in keys},
        "max_s": {key: max(run[key] for run in runs) for key in keys},
        "runs": runs, "machine": info, "measured_at": records.utc_now(),
    }


def write(report, out, stem):
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    lines = [f"# Per-cell fixed cost: full-size ViT, random weights, CPU, mode {report['mode']}", "",
             f"Machine: {report['machine']['cpu_model']}, {report['machine']['cores']} cores, "
             f"torch {report['machine']['torch']}, transformers {report['machine']['transformers']}, "
             f"Python {report['machine']['python']}; load average at end {report['machine']['load_average_at_end']}.",
             f"Measured {report['measured_at']}, {report['repeats']} cells after one warming cell.", "",
             f"One-time startup (forkserver imports torch, transformers, runner; probe): "
             f"{report['one_time_startup_s']:.2f} s", "",
             "| phase | median s | max s |", "| --- | ---: | ---: |"]
    lines += [f"| {key} | {report['median_s'][key]:.3f} | {report['max_s'][key]:.3f} |" for key in report["median_s"]]
    verdict = "meets" if report["median_s"]["fixed_cost"] <= report["target_s"] else "misses"
    lines += ["", f"fixed_cost = start_to_first_timed_iteration - first_call - warmup: median "
              f"{report['median_s']['fixed_cost']:.3f} s, which {verdict} the {report['target_s']} s target."]
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
