"""Slots on the CPU (issue 15): the CPU smoke matrix's wall time on 1 slot x all cores vs N slots of
one core each, and the slots' interference calibration.

Runs ``matrixbench run --matrix matrix-cpu-smoke.yaml --images latest --backend local --device cpu``
(this interpreter's torch; the local backend runs one image) from scratch, alternating the two
configurations A B A B ... over ``--rounds`` rounds: A = ``--slots 1`` (one slot with every usable
core, OMP threads = cores), B = ``--slots N`` (N = the usable cores, one core each). Every run has
its own run folder and empty compile cache, so each compiles cold. Then a run of its own with
``--calibrate`` (and resnet eager as its matrix): resnet tiny, bs 1, eager and default on each slot
alone, then on all at once, ``--calibration-repeats`` rounds; the report's calibration table
(loaded / alone with its interval and verdict) is kept.

    python benchmarks/bench_slots_cpu.py [--rounds 2] [--repeats 1] [--models vit,resnet,segformer,detr-resnet-101]
        [--iterations 20] [--calibration-repeats 2] [--out benchmarks/results]

Writes <out>/slots_cpu.json and .md with the machine (lscpu), the load average and CPU pressure
before and after each run, and prints the table. Run it at normal priority: tests elsewhere run at
nice 19, but with autogroup on they still take their share of the cores.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import contention, describe, describe_contention, lscpu  # noqa: E402
from matrixbench.report import records  # noqa: E402
from matrixbench.report.calibration import calibration_tables  # noqa: E402
from runner.schema import read_record  # noqa: E402

SMOKE_MATRIX = ROOT / "matrix-cpu-smoke.yaml"
SMOKE_MODELS = ("vit", "resnet", "segformer", "detr-resnet-101")


def cores():
    return len(os.sched_getaffinity(0))


def matrixbench_run(folder, name, slots, args, models=None, repeats=None, extra=()):
    """One ``matrixbench run`` of the smoke matrix; its wall time, load and records' statuses."""
    argv = [sys.executable, "-c", "from matrixbench.cli import main; main()", "run", "--matrix", str(SMOKE_MATRIX),
            "--images", "latest", "--models", ",".join(models or args.models),
            "--repeats", str(repeats or args.repeats),
            "--iterations", str(args.iterations), "--backend", "local", "--device", "cpu", "--run", name,
            "--results", str(folder / "results"), "--cache-dir", str(folder / f"cache-{name}"),
            "--slots", str(slots), *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    before, pressure_before, started = os.getloadavg(), contention(), time.monotonic()
    done = subprocess.run(argv, env=env, cwd=folder, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"run {name} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return {"run": name, "slots": slots, "wall_s": round(wall, 1), "loadavg_before": before,
            "loadavg_after": os.getloadavg(), "contention_before": pressure_before,
            "contention_after": contention(), "statuses": statuses(folder / "results" / name)}


def statuses(run_path):
    """{status: count} of the matrix's records (calibration records apart)."""
    found = {}
    for path in run_path.glob("*/*.json"):
        if path.name != "cells.json":
            status = read_record(path)["status"]
            found[status] = found.get(status, 0) + 1
    return found


def calibration(run_path):
    """The report's calibration table of a run folder, as plain rows."""
    _, frame = records.split_calibration(records.load_results([run_path]))
    return [{"title": table.title, "rows": [dict(zip(table.header, (cell.text for cell in row))) for row in table.rows]}
            for table in calibration_tables(frame)]


def measure(args, save=lambda partial: None):
    """The runs, A B interleaved, then the calibration; ``save(partial)`` after each run."""
    n = cores()
    configs = {"A": 1, "B": n}
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-slots-") as tmp:
        folder = Path(tmp)
        for index in range(args.rounds):
            for label, slots in configs.items():
                run = matrixbench_run(folder, f"{label}{index}", slots, args)
                run["config"] = label
                runs.append(run)
                save({"cores": n, "runs": runs, "partial": True})
                print(f"round {index + 1} {label} ({slots} slot(s)): {run['wall_s']} s, "
                      f"load {run['loadavg_before'][0]:.1f} -> {run['loadavg_after'][0]:.1f}",
                      file=sys.stderr, flush=True)
        # a run of its own: resnet eager as its matrix (short), the calibration before it
        calibrated = matrixbench_run(folder, "C", n, args, models=["resnet"], repeats=args.calibration_repeats,
                                     extra=["--modes", "eager", "--calibrate", "--calibration-models", "resnet"])
        calibrated["config"] = "calibrate"
        tables = calibration(folder / "results" / "C")
    return {"cores": n, "configs": {label: f"--slots {slots}" for label, slots in configs.items()}, "runs": runs,
            "calibration_run": calibrated, "calibration": tables}


def summary(result):
    walls = {label: [run["wall_s"] for run in result["runs"] if run["config"] == label] for label in ("A", "B")}
    medians = {label: statistics.median(values) for label, values in walls.items()}
    return {"median_wall_s": medians, "b_over_a": round(medians["B"] / medians["A"], 3)}


def markdown(result):
    n = result["cores"]
    lines = ["# Slots on the CPU: smoke matrix wall time, 1 slot x cores vs slots of one core", "",
             f"{describe(result['machine'])}", "",
             f"Matrix: {', '.join(result['args']['models'])} (tiny), batch 1, eager and default, "
             f"{result['args']['repeats']} process(es) per cell, {result['args']['iterations']} iterations, image "
             f"latest through --backend local (this interpreter's torch), every run from scratch (own run folder, "
             f"empty compile cache), A B interleaved over {result['args']['rounds']} rounds. "
             f"A = --slots 1 (one slot of {n} cores), B = --slots {n} (one core each).", "",
             "| round | config | wall (s) | records | load avg before -> after (1 min) "
             "| CPU pressure before -> after |",
             "| ---: | --- | ---: | --- | --- | --- |"]
    for index, run in enumerate(result["runs"]):
        lines.append(f"| {index // 2 + 1} | {run['config']} ({result['configs'][run['config']]}) | {run['wall_s']} | "
                     f"{_statuses(run)} | {run['loadavg_before'][0]:.2f} -> {run['loadavg_after'][0]:.2f} | "
                     f"{describe_contention(run['contention_before'])} -> "
                     f"{describe_contention(run['contention_after'])} |")
    s = result["summary"]
    lines += ["", f"Median wall time: A {s['median_wall_s']['A']} s, B {s['median_wall_s']['B']} s; "
              f"B / A = {s['b_over_a']} (below 1: the slots finish sooner).", "",
              f"## Interference calibration (--calibrate, {result['args']['calibration_repeats']} round(s), "
              f"wall {result['calibration_run']['wall_s']} s, load {result['calibration_run']['loadavg_before'][0]:.2f}"
              f" -> {result['calibration_run']['loadavg_after'][0]:.2f})", ""]
    for table in result["calibration"]:
        header = list(table["rows"][0])
        lines += [f"### {table['title']}", "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        lines += ["| " + " | ".join(row[key] for key in header) + " |" for row in table["rows"]]
        lines.append("")
    return "\n".join(lines) + "\n"


def _statuses(run):
    return ", ".join(f"{count} {status}" for status, count in sorted(run["statuses"].items()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="processes per cell (the smoke matrix says 3)")
    parser.add_argument("--models", type=lambda text: text.split(","), default=list(SMOKE_MODELS))
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--calibration-repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    if cores() < 2:
        raise SystemExit("needs 2 or more usable cores: one slot per core")
    args.out.mkdir(parents=True, exist_ok=True)
    machine = {"machine": lscpu(), "args": {**vars(args), "out": str(args.out)}}

    def save(partial):   # what ran so far, should the rest not finish
        (args.out / "slots_cpu.partial.json").write_text(json.dumps({**machine, **partial}, indent=2) + "\n")

    result = {**machine, **measure(args, save)}
    result["summary"] = summary(result)
    (args.out / "slots_cpu.partial.json").unlink(missing_ok=True)
    (args.out / "slots_cpu.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    text = markdown(result)
    (args.out / "slots_cpu.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
