"""Timing-loop overhead per iteration: runner.timing against a bare loop, trivial module, CPU.

The bare loop is ``for _ in range(n): step()`` timed as a whole; the runner's loop takes
two perf_counter readings and stores a sample per iteration. The difference per iteration
is what the runner adds to every measured latency. Target: <= 5 us on CPU.

    python benchmarks/bench_timing_loop.py [--iterations 20000] [--repeats 15] [--out benchmarks/results]
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from runner.machine import cpu_model  # noqa: E402
from runner.records import utc_now  # noqa: E402
from runner.timing import time_iterations  # noqa: E402

TARGET_US = 5.0


def bare_loop(step, iterations):
    start = time.perf_counter()
    for _ in range(iterations):
        step()
    return time.perf_counter() - start


def runner_loop(step, iterations):
    start = time.perf_counter()
    time_iterations(step, iterations, "cpu")
    return time.perf_counter() - start


def measure(iterations, repeats):
    """Interleaved repeats; the minimum of each is the least disturbed by other processes."""
    model, x = torch.nn.Identity(), torch.ones(1)
    step = lambda: model(x)  # noqa: E731  (what runner.cell times: one module call)
    bare, runner = [], []
    with torch.no_grad():
        bare_loop(step, iterations)
        for _ in range(repeats):
            bare.append(bare_loop(step, iterations) / iterations * 1e6)
            runner.append(runner_loop(step, iterations) / iterations * 1e6)
    return bare, runner


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args()
    bare, runner = measure(args.iterations, args.repeats)
    report = {
        "benchmark": "timing_loop_overhead", "module": "torch.nn.Identity on a 1-element tensor",
        "iterations": args.iterations, "repeats": args.repeats, "target_us": TARGET_US,
        "bare_us_per_iteration": {"min": min(bare), "median": statistics.median(bare)},
        "runner_us_per_iteration": {"min": min(runner), "median": statistics.median(runner)},
        "overhead_us_per_iteration": {"min": min(runner) - min(bare),
                                      "median": statistics.median(runner) - statistics.median(bare)},
        "machine": {"cpu_model": cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__,
                    "python": sys.version.split()[0], "threads": torch.get_num_threads(),
                    "load_average_at_end": os.getloadavg()},
        "measured_at": utc_now(),
    }
    write(report, Path(args.out))


def _row(label, us_per_iteration):
    return f"| {label} | {us_per_iteration['min']:.3f} | {us_per_iteration['median']:.3f} |"


def write(report, out):
    out.mkdir(parents=True, exist_ok=True)
    (out / "timing_loop.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    machine, overhead = report["machine"], report["overhead_us_per_iteration"]
    verdict = "meets" if overhead["median"] <= TARGET_US else "misses"
    lines = [
        "# Timing-loop overhead per iteration (CPU)", "",
        f"Machine: {machine['cpu_model']}, {machine['cores']} cores, torch {machine['torch']}, "
        f"Python {machine['python']}; load average at end {machine['load_average_at_end']}.",
        f"Measured {report['measured_at']}: {report['module']}, {report['iterations']} iterations "
        f"x {report['repeats']} interleaved repeats.", "",
        "| loop | min us/iter | median us/iter |", "| --- | ---: | ---: |",
        _row("bare `for` loop", report["bare_us_per_iteration"]),
        _row("runner.timing", report["runner_us_per_iteration"]),
        _row("overhead", overhead), "",
        f"Median overhead {overhead['median']:.3f} us per iteration, which {verdict} the {TARGET_US} us target.",
    ]
    (out / "timing_loop.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
