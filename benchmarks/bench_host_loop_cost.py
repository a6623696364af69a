"""The launch timer's cost (issue 32 item 1): a null step through the CUDA timed loop before issue 32 (copied
below) and now (``runner.timing``, two more clock reads a call), with a do-nothing fake CUDA module so that
only the loop's own Python is timed; the CPU loop too (unchanged: its sample is the launch time).
Interleaved ABAB repeats, each timed by this process's CPU time (``time.process_time``: on a shared machine the
wall clock counts other processes' time slices too); the budget is 1 us per call more than before.

    python benchmarks/bench_host_loop_cost.py [--iterations 20000] [--repeats 15] [--out benchmarks/results]
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import NullCuda, contention, describe, describe_contention, lscpu, write_summary  # noqa: E402

from runner.records import utc_now  # noqa: E402
from runner.timing import time_iterations  # noqa: E402

BUDGET_US = 1.0



def old_time_cuda(step, iterations, cuda, clock=time.perf_counter):
    """runner.timing._time_cuda as it was before issue 32 (main at 9ba6d4c)."""
    starts = [cuda.Event(enable_timing=True) for _ in range(iterations)]
    ends = [cuda.Event(enable_timing=True) for _ in range(iterations)]
    output = None
    cuda.synchronize()
    loop_start = clock()
    for start, end in zip(starts, ends):
        output = None
        start.record()
        output = step()
        end.record()
    cuda.synchronize()
    loop_wall = clock() - loop_start
    samples = [start.elapsed_time(end) for start, end in zip(starts, ends)]
    return samples, output, loop_wall * 1000.0


def measure(iterations, repeats):
    cuda = NullCuda()

    def null():
        return None

    def arm(run):
        def timed():   # this process's CPU time: what the loop costs, without the time others took the CPU
            start = time.process_time()
            run()
            return (time.process_time() - start) / iterations * 1e6
        return timed

    arms = {"cuda_before": arm(lambda: old_time_cuda(null, iterations, cuda)),
            "cuda_now": arm(lambda: time_iterations(null, iterations, "cuda", cuda=cuda)),
            "cpu_now": arm(lambda: time_iterations(null, iterations, "cpu"))}
    found = {name: [] for name in arms}
    for run in arms.values():
        run()
    for index in range(repeats):
        for name in (list(arms) if index % 2 == 0 else list(reversed(arms))):
            found[name].append(arms[name]())
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    found = measure(args.iterations, args.repeats)
    summary = {name: {"min": min(v), "median": statistics.median(v)} for name, v in found.items()}
    increment = {key: summary["cuda_now"][key] - summary["cuda_before"][key] for key in ("min", "median")}
    report = {"benchmark": "host_loop_cost", "issue": "32 item 1", "iterations": args.iterations,
              "repeats": args.repeats, "us_per_call": summary, "launch_timer_increment_us": increment,
              "budget_us": BUDGET_US, "within_budget": increment["median"] <= BUDGET_US, "raw_us": found,
              "machine": {"lscpu": lscpu(), "python": sys.version.split()[0], "load_average_before": load_before,
                          "load_average_after": os.getloadavg(), "contention": contention()},
              "measured_at": utc_now()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "host_loop_cost.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    machine = report["machine"]
    lines = ["# The launch timer's cost per call (issue 32 item 1), null step, fake CUDA", "",
             describe(machine["lscpu"]),
             f"Python {machine['python']}; load average before {machine['load_average_before']}, after "
             f"{machine['load_average_after']}; contention: {describe_contention(machine['contention'])}.",
             f"Measured {report['measured_at']}: {args.iterations} calls x {args.repeats} interleaved repeats.", "",
             "| loop (process CPU time) | min us/call | median us/call |", "| --- | ---: | ---: |",
             *(f"| {name} | {v['min']:.3f} | {v['median']:.3f} |" for name, v in summary.items()),
             f"| launch timer (cuda_now - cuda_before) | {increment['min']:.3f} | {increment['median']:.3f} |", "",
             f"The launch timer adds {increment['median']:.3f} us per call (median), "
             f"{'within' if report['within_budget'] else 'beyond'} the {BUDGET_US} us budget."]
    write_summary(out / "host_loop_cost.md", lines)


if __name__ == "__main__":
    main()
