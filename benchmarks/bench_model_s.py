"""What a run's processes took against the bill's generic model (scheduler.MODEL_S): the numbers behind the model a
new results folder is billed with (no records yet, so no pace), by the matrix's model size and mode.

Reads finished runs (``RUN_DIR``: ``results/<run>``, e.g. what ``make matrix`` wrote): per model size and mode the
processes' durations (``duration_s``: the runner's whole process, build, compile and timed loop), the runner starts
(scheduler.Estimates.runner_start_s: the gaps between one runner's last record and the next's first), the run's
wall time (run.json), and what the generic model of each size would have billed for the same processes
(scheduler.generic_s, with the run's settings). Writes results/<--name>.{json,md} with the machine and its load.

    python benchmarks/bench_model_s.py results/cpu-smoke --name model_s_tiny_cpu --note "make matrix, ..."
"""
import argparse
import json
import os
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import write_results  # noqa: E402

from matrixbench.executors.scheduler import MODEL_S, TINY_MODEL_S, Estimates, generic_s  # noqa: E402
from matrixbench.run.manifest import read_manifest  # noqa: E402
from matrixbench.run.pending import ImageWork  # noqa: E402
from matrixbench.run.results_files import Unvouched, read_record  # noqa: E402
from runner.schema import RecordError  # noqa: E402


def read_run(run_path):
    """(records, image folders, wall seconds, paired) of a finished run."""
    manifest = read_manifest(run_path) or {}
    started, ended = manifest.get("started_at"), manifest.get("ended_at")
    wall = (datetime.fromisoformat(ended) - datetime.fromisoformat(started)).total_seconds() \
        if started and ended else None
    records, folders = [], []
    for folder in sorted(path for path in run_path.iterdir() if path.is_dir() and not path.name.startswith(".")):
        found = []
        for path in sorted(folder.glob("*.json")):
            try:
                found.append(read_record(path))
            except (Unvouched, RecordError, OSError, ValueError):   # cells.json, a broken file: no process
                continue
        if found:
            folders.append(folder)
            records += found
    paired = ((manifest.get("matrix") or {}).get("paired", True))
    return records, folders, wall, paired


def measure(run_paths):
    runs = []
    for run_path in run_paths:
        records, folders, wall, paired = read_run(run_path)
        works = [ImageWork(folder.name, folder, [], []) for folder in folders]
        start_s = Estimates().runner_start_s(works)
        by_mode = {}
        for record in records:
            key = f"{record['cell']['size']} {record['cell']['mode']}"
            by_mode.setdefault(key, []).append(float(record["duration_s"]))
        runs.append({"run": str(run_path), "processes": len(records), "wall_s": wall, "runner_start_s": start_s,
                     "runners": len(folders), "paired": paired,
                     "processes_s": sum(sum(values) for values in by_mode.values()),
                     "by_mode": {key: {"n": len(values), "mean_s": statistics.fmean(values),
                                       "median_s": statistics.median(values), "min_s": min(values),
                                       "max_s": max(values)} for key, values in sorted(by_mode.items())}})
    return rebill({"runs": runs})


def rebill(result):
    """``result`` with what today's generic model (scheduler.generic_s, full and tiny) bills for each run's
    processes (by size and mode, from ``by_mode``), and the model's table."""
    for run in result["runs"]:
        counts = [(key.split(" ", 1), row["n"]) for key, row in run["by_mode"].items()]
        run["generic_billed_s"] = {size: sum(n * generic_s(mode, size, run["paired"]) for (_, mode), n in counts)
                                   for size in ("full", "tiny")}
    return {**result, "model_s": {"full": MODEL_S, "tiny": TINY_MODEL_S}}


def markdown(result):
    lines = ["# A run's processes against the bill's generic model (scheduler.MODEL_S, TINY_MODEL_S)", "",
             f"Machine: {result['machine'].get('Model name', '?')}, {result['machine'].get('CPU(s)', '?')} CPUs; "
             f"load average when this summary was made {result['load_average']}.", ""]
    lines += [result["note"], ""] if result.get("note") else []
    for run in result["runs"]:
        wall = f"{run['wall_s']:.0f} s" if run["wall_s"] is not None else "unknown"
        start = f"{run['runner_start_s']:.1f} s" if run["runner_start_s"] is not None else "none seen"
        lines += [f"## {run['run']}", "",
                  f"{run['processes']} processes; their durations sum to {run['processes_s']:.0f} s; the run's wall "
                  f"time {wall}; a runner start {start} (median gap).", "",
                  "| size, mode | processes | mean s | median s | min s | max s |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        lines += [f"| {key} | {row['n']} | {row['mean_s']:.1f} | {row['median_s']:.1f} | {row['min_s']:.1f} | "
                  f"{row['max_s']:.1f} |" for key, row in run["by_mode"].items()]
        lines += ["", "What the generic model would bill for these processes (no runner starts): "
                  + ", ".join(f"{size} {seconds:.0f} s" for size, seconds in run["generic_billed_s"].items()) + ".",
                  ""]
    lines += ["Generic model (s a process, before the paired eager blocks a compiled cell adds): "
              + "; ".join(f"{size}: " + ", ".join(f"{mode} {seconds:g}" for mode, seconds in table.items())
                          for size, table in result["model_s"].items()), ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="finished runs' folders (results/<run>)")
    parser.add_argument("--rebill", action="store_true",
                        help="no runs: bill results/<name>.json's measured processes again with today's model "
                             "(after the model changed), keeping its measurements, machine and load")
    parser.add_argument("--name", default="model_s", help="results/<name>.{json,md}")
    parser.add_argument("--note", default="", help="how the runs were made (the command, the load), for the file")
    args = parser.parse_args(argv)
    if args.rebill:
        path = ROOT / "benchmarks" / "results" / f"{args.name}.json"
        result = rebill(json.loads(path.read_text()))
        path.write_text(json.dumps(result, indent=2, default=float) + "\n")
        path.with_suffix(".md").write_text(markdown(result))
        print(markdown(result))
        return
    if not args.runs:
        parser.error("give finished runs' folders, or --rebill")
    started = time.monotonic()
    load = list(os.getloadavg())
    write_results(ROOT / "benchmarks" / "results", args.name, {**measure(args.runs), "note": args.note}, markdown,
                  load=load, started=started)


if __name__ == "__main__":
    main()
