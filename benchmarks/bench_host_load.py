"""A competing CPU load switched on and off at random during a run (issue 32's CPU experiment).

Runs ``python -m runner`` on a cells file (tiny ResNet, eager and default, ``--device cpu``, paired blocks on)
twice: a quiet run (no load of ours), then a loaded run during which one busy Python loop, started here and
stopped and resumed by its pid (SIGSTOP / SIGCONT) at random intervals, competes for the CPU. For each cell
process it keeps what the record says of the host (``timing.host``), the share of its timed loop the load was
on (from the load's switch times and the record's ``timing.windows.timed``), its mean, and its paired blocks
(eager / compiled per block pair, ``timing.paired``). The machine's own load (other sessions) is recorded
too: this is a shared 2-core VM.

    python benchmarks/bench_host_load.py [--processes 3] [--iterations 200] [--seed 7] [--out benchmarks/results]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from load import Load  # noqa: E402
from machine import contention, describe, describe_contention, lscpu, write_summary  # noqa: E402


def cells_file(path, processes, iterations, warmup):
    cell = {"model": "resnet", "model_id": "microsoft/resnet-50", "task": "image-classification", "weights": "random",
            "size": "tiny", "batch_size": 1, "fullgraph": False, "dtype": "float32", "attention": "eager"}
    document = {"schema_version": 3,
                "settings": {"iterations": iterations, "warmup": warmup, "device": "cpu", "paired": True,
                             "min_time_s": 0},
                "cells": [dict(cell, mode="eager"), dict(cell, mode="default")],
                "repeats": [[cell_index, repeat] for repeat in range(processes) for cell_index in (0, 1)]}
    Path(path).write_text(json.dumps(document))


def run(out, cells, cache):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),
               TRITON_CACHE_DIR=str(cache / "triton"))
    subprocess.run([sys.executable, "-m", "runner", "--cells", str(cells), "--out", str(out)], env=env, check=True,
                   cwd=str(ROOT))


def summarize(out, load=None):
    rows = []
    for path in sorted(Path(out).glob("*.json")):
        record = json.loads(path.read_text())
        if "cell" not in record or record.get("status") != "ok":
            continue
        timing = record["timing"]
        host = timing["host"]
        window = timing["windows"]["timed"]
        paired = timing.get("paired")
        rows.append({
            "process": path.stem, "mode": record["cell"]["mode"], "mean_ms": timing["mean_ms"],
            "median_ms": timing["median_ms"], "load_on_share": load.on_share(*window) if load else 0.0,
            "stalls": host["stalls"], "stall_share": host["stall_share"], "stall_laden": host["stall_laden"],
            "involuntary_ctx_switches": host["involuntary_ctx_switches"], "cpu_share": host["cpu_share"],
            "steal_share": host["steal_share"], "speed_change": host["speed_change"], "marks": host["marks"],
            "paired_speedup_median": paired["speedup_median"] if paired else None,
            "paired_speedup_median_of_medians": paired.get("speedup_median_of_medians") if paired else None,
            "paired_ratios": [p["eager_ms"] / p["compiled_ms"] for p in paired["pairs"]] if paired else None,
            "paired_pairs_ms": [[p["eager_ms"], p["compiled_ms"]] for p in paired["pairs"]] if paired else None,
            "paired_ratios_of_medians": [p["eager_median_ms"] / p["compiled_median_ms"] for p in paired["pairs"]
                                         if p.get("compiled_median_ms")] if paired else None,
            "unpaired_median_ms": timing["median_ms"],
        })
    return rows


def unpaired_ratios(rows):
    """eager mean / default mean of the n-th eager and n-th default process."""
    eager = [r["mean_ms"] for r in rows if r["mode"] == "eager"]
    default = [r["mean_ms"] for r in rows if r["mode"] == "default"]
    return [e / d for e, d in zip(eager, default)]


def unpaired_median_ratios(rows):
    eager = [r["median_ms"] for r in rows if r["mode"] == "eager"]
    default = [r["median_ms"] for r in rows if r["mode"] == "default"]
    return [e / d for e, d in zip(eager, default)]


def judged(rows, margin_pct=3.0):
    """What the report would say of eager / default from these processes: the paired speed-up
    (stats.judge_paired on each default process's block pairs) and the unpaired one (stats.judge on the
    eager and default process means), each as {speedup, low, high, verdict}."""
    from matrixbench.report import stats

    pairs = [[tuple(p) for p in r["paired_pairs_ms"]] for r in rows if r.get("paired_pairs_ms")]
    paired = stats.judge_paired(pairs, margin_pct=margin_pct)
    eager = [r["mean_ms"] for r in rows if r["mode"] == "eager"]
    default = [r["mean_ms"] for r in rows if r["mode"] == "default"]
    unpaired = stats.judge(eager, default, margin_pct=margin_pct)

    def speedup(judgement, invert):
        flip = (lambda x: None if x is None else 1.0 / x) if invert else (lambda x: x)
        low, high = flip(judgement.low), flip(judgement.high)
        return {"speedup": flip(judgement.ratio), "low": min(low, high) if low is not None else None,
                "high": max(low, high) if high is not None else None, "verdict": judgement.verdict}

    # judge_paired reads speed-ups already; judge reads default / eager, a speed-up's inverse
    return {"paired": speedup(paired, False), "unpaired": speedup(unpaired, True)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()

    from runner.records import utc_now

    with tempfile.TemporaryDirectory(prefix="mb-host-load-") as scratch:
        scratch_path = Path(scratch)
        cells = scratch_path / "cells.json"
        cells_file(cells, args.processes, args.iterations, args.warmup)
        load_before = os.getloadavg()
        run(scratch_path / "quiet", cells, scratch_path / "cache")
        quiet = summarize(scratch_path / "quiet")
        load = Load(args.seed)
        load.start()
        try:
            run(scratch_path / "loaded", cells, scratch_path / "cache")
        finally:
            load.close()
        loaded = summarize(scratch_path / "loaded", load)
    report = {"benchmark": "host_load", "issue": "32", "seed": args.seed, "processes": args.processes,
              "iterations": args.iterations, "quiet": quiet, "loaded": loaded,
              "load_switches": load.switches, "load_pid": load.pids[0],
              "unpaired_eager_over_default": {"quiet": unpaired_ratios(quiet), "loaded": unpaired_ratios(loaded)},
              "unpaired_median_eager_over_default": {"quiet": unpaired_median_ratios(quiet),
                                                     "loaded": unpaired_median_ratios(loaded)},
              "judged": {"quiet": judged(quiet), "loaded": judged(loaded)},
              "machine": {"lscpu": lscpu(), "load_average_before": load_before, "load_average_after": os.getloadavg(),
                          "contention": contention()},
              "measured_at": utc_now()}
    write(report, Path(args.out), describe, describe_contention)


def _fmt(value, spec=".3f"):
    return "-" if value is None else format(value, spec)


def write(report, out, describe, describe_contention):
    out.mkdir(parents=True, exist_ok=True)
    (out / "host_load.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    machine = report["machine"]
    lines = ["# A competing CPU load switched on and off at random (issue 32, CPU)", "",
             describe(machine["lscpu"]),
             f"Load average before {machine['load_average_before']}, after {machine['load_average_after']} (other "
             f"sessions share this VM); contention: {describe_contention(machine['contention'])}.",
             f"Measured {report['measured_at']}: tiny ResNet, eager and default, {report['processes']} processes of "
             f"each per run, {report['iterations']} timed calls, paired blocks on; the loaded run's busy loop "
             f"(pid {report['load_pid']}) switched {len(report['load_switches']) - 2} times (seed {report['seed']}).",
             "", "| run | process | mode | load on (timed loop) | mean ms | median ms | stalls | stall share | "
             "invol. cs | cpu share | steal | speed change | marks | paired eager/compiled (median) |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for name in ("quiet", "loaded"):
        for r in report[name]:
            lines.append(f"| {name} | {r['process']} | {r['mode']} | {r['load_on_share']:.0%} | {r['mean_ms']:.3f} | "
                         f"{r['median_ms']:.3f} | {r['stalls']} | {_fmt(r['stall_share'])} | "
                         f"{r['involuntary_ctx_switches']} | {_fmt(r['cpu_share'], '.2f')} | "
                         f"{_fmt(r['steal_share'], '.4f')} | {_fmt(r['speed_change'], '+.2f')} | "
                         f"{', '.join(r['marks'])} | {_fmt(r['paired_speedup_median'])} |")
    unpaired = report["unpaired_eager_over_default"]
    paired = {name: [r["paired_speedup_median"] for r in report[name] if r["paired_speedup_median"]]
              for name in ("quiet", "loaded")}
    robust = {name: [r["paired_speedup_median_of_medians"] for r in report[name]
                     if r.get("paired_speedup_median_of_medians")] for name in ("quiet", "loaded")}
    medians = {name: unpaired_median_ratios(report[name]) for name in ("quiet", "loaded")}
    lines += ["", "Eager / default:",
              f"- unpaired (the n-th eager process's mean over the n-th default process's): quiet "
              f"{', '.join(f'{x:.3f}' for x in unpaired['quiet'])}; loaded "
              f"{', '.join(f'{x:.3f}' for x in unpaired['loaded'])}",
              f"- unpaired medians (the same, with each process's median call): quiet "
              f"{', '.join(f'{x:.3f}' for x in medians['quiet'])}; loaded "
              f"{', '.join(f'{x:.3f}' for x in medians['loaded'])}",
              f"- paired (median over each default process's block pairs of the block means): quiet "
              f"{', '.join(f'{x:.3f}' for x in paired['quiet'])}; loaded "
              f"{', '.join(f'{x:.3f}' for x in paired['loaded'])}",
              f"- paired, block medians (median over the pairs of the blocks' median calls): quiet "
              f"{', '.join(f'{x:.3f}' for x in robust['quiet'])}; loaded "
              f"{', '.join(f'{x:.3f}' for x in robust['loaded'])}"]
    if report.get("judged"):
        lines += ["", "As the report judges eager / default (margin 3%, 95% intervals):"]
        for kind, text in (("paired", "paired speed-up (stats.judge_paired, each process one draw)"),
                           ("unpaired", "unpaired speed-up (stats.judge on the process means)")):
            parts = []
            for name in ("quiet", "loaded"):
                j = report["judged"][name][kind]
                interval = f" [{j['low']:.3f}, {j['high']:.3f}]" if j["low"] is not None else ""
                parts.append(f"{name} {j['speedup']:.3f}x{interval} {j['verdict']}")
            lines.append(f"- {text}: {'; '.join(parts)}")
    write_summary(out / "host_load.md", lines)


if __name__ == "__main__":
    main()
