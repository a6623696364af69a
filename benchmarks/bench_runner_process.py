"""Does the runner's own process make launch-bound cells slower? (issue 30 item 2, on the CPU)

Two measurements, both interleaved so that the machine's load falls on both sides alike:

1. The timed loop's own cost per call: a null step (a Python function returning None) through
   ``runner.timing.time_iterations`` (CPU loop, and the CUDA loop with a do-nothing fake CUDA
   module, launch timer included) against a bare ``for`` loop; ABAB repeats, min and median.
2. A launch-bound CPU step (``OPS`` tiny tensor ops on an 8-element tensor: the CPU-side shape of
   an eager ResNet at batch 1, all host work) timed in a cell's process as the runner makes one
   (forked from the runner's forkserver, which preloads ``runner.worker``: torch, transformers, the
   models; its own process group, the death signal, the compile cache variables, the precision
   flags, dynamo reset, ``torch.no_grad``, the parent polling the child's pipe every 0.5 s, and
   ``runner.timing.time_iterations``) against the same step in a bare ``python`` process that
   imports torch only and times a plain loop. Rounds alternate A B B A ..., each side a fresh
   process per round. Each side also says what differs: threads, affinity, gc collections during
   the loop, involuntary context switches, the heap's object count.

    python benchmarks/bench_runner_process.py [--rounds 6] [--calls 1500] [--out benchmarks/results]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import NullCuda, contention, describe, describe_contention, lscpu, write_summary  # noqa: E402

OPS = 60          # tiny tensor ops per call
QUIET_CS = 50     # involuntary context switches in a loop of --calls calls: more means another load ran
WARMUP = 200


def launch_bound_step():
    import torch

    x = torch.ones(8)

    def step():
        y = x
        for _ in range(OPS):
            y = y + 1.0
        return y
    return step


def _loop_facts(run):
    """Run ``run()`` and return (its result, what the process did meanwhile)."""
    gc_before = [s["collections"] for s in gc.get_stats()]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result = run()
    after = resource.getrusage(resource.RUSAGE_SELF)
    gc_after = [s["collections"] for s in gc.get_stats()]
    import torch

    started = time.perf_counter()
    gc.collect()
    full_gc_ms = (time.perf_counter() - started) * 1000.0
    return result, {
        "full_gc_ms": full_gc_ms,
        "gc_collections": [b - a for a, b in zip(gc_before, gc_after)],
        "involuntary_ctx_switches": after.ru_nivcsw - usage.ru_nivcsw,
        "threads_torch": torch.get_num_threads(),
        "os_threads": len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None,
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "gc_objects": len(gc.get_objects()),
        "gc_enabled": gc.isenabled(),
        "malloc_env": {k: v for k, v in os.environ.items() if k.startswith(("MALLOC", "OMP", "MKL", "PYTORCH"))},
    }


def _stats(samples_ms):
    ordered = sorted(samples_ms)
    quarter = max(1, len(samples_ms) // 4)
    return {"median_ms": statistics.median(ordered), "mean_ms": statistics.fmean(ordered),
            "p90_ms": ordered[int(0.9 * (len(ordered) - 1))], "min_ms": ordered[0],
            "quarter_medians_ms": [statistics.median(samples_ms[i:i + quarter])
                                   for i in range(0, quarter * 4, quarter)],
            "last_cpu": _cpu()}


def _cpu():
    """The CPU this process last ran on (/proc/self/stat field 39), None elsewhere."""
    try:
        with open("/proc/self/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


# --- the runner's side: a function of this module, called in a cell's process -----------------

def runner_child(calls, channel):
    """What runner.worker.run_job does before its timed loop, then the loop, in a cell's process."""
    import torch

    from runner import worker
    from runner.compile import reset, use_cache_dirs
    from runner.precision import apply_precision
    from runner.timing import time_iterations

    worker._own_process_group()
    use_cache_dirs({"TORCHINDUCTOR_CACHE_DIR": None, "TRITON_CACHE_DIR": None})
    apply_precision()
    reset()
    step = launch_bound_step()
    with torch.no_grad():
        for _ in range(WARMUP):
            step()
        loop, facts = _loop_facts(lambda: time_iterations(step, calls, "cpu"))
    channel.send({**_stats(loop.samples_ms), **facts})
    channel.close()


def run_in_runner_process(launcher, calls):
    from runner.isolation import _call, _kill_group, _watch

    receiver, sender = launcher._context.Pipe(duplex=False)
    process = launcher._context.Process(target=_call, args=("bench_runner_process", "runner_child", (calls,), sender))
    process.start()
    sender.close()
    try:
        messages, _ = _watch(process, receiver, 300)
    finally:
        _kill_group(process)
        receiver.close()
    return messages[-1]


# --- the bare side: a fresh python that imports torch only ------------------------------------

def bare_child(calls):
    import torch

    step = launch_bound_step()

    def plain():
        samples = []
        for _ in range(calls):
            start = time.perf_counter()
            step()
            samples.append((time.perf_counter() - start) * 1000.0)
        return samples
    with torch.no_grad():
        for _ in range(WARMUP):
            step()
        samples, facts = _loop_facts(plain)
    print(json.dumps({**_stats(samples), **facts}))


def run_in_bare_process(calls):
    out = subprocess.run([sys.executable, __file__, "--bare-child", str(calls)], capture_output=True, text=True,
                         check=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {
                             "PYTHONPATH": str(ROOT)})
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- the null step ------------------------------------------------------------------------------


def null_loop_cost(iterations, repeats):
    """us per call: bare for loop, runner CPU loop, runner CUDA loop (fake CUDA), interleaved."""
    from runner.timing import time_iterations

    def null():
        return None

    def bare():
        start = time.perf_counter()
        for _ in range(iterations):
            null()
        return (time.perf_counter() - start) / iterations * 1e6

    def timed(device):
        def run():
            start = time.perf_counter()
            time_iterations(null, iterations, device, cuda=NullCuda())
            return (time.perf_counter() - start) / iterations * 1e6
        return run

    arms = {"bare": bare, "runner_cpu": timed("cpu"), "runner_cuda_fake": timed("cuda")}
    found = {name: [] for name in arms}
    for arm in arms.values():
        arm()
    for i in range(repeats):
        order = list(arms) if i % 2 == 0 else list(reversed(arms))
        for name in order:
            found[name].append(arms[name]())
    summary = {name: {"min": min(v), "median": statistics.median(v)} for name, v in found.items()}
    for name in ("runner_cpu", "runner_cuda_fake"):
        summary[name + "_minus_bare"] = {key: summary[name][key] - summary["bare"][key] for key in ("min", "median")}
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--null-iterations", type=int, default=20000)
    parser.add_argument("--null-repeats", type=int, default=11)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--bare-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_child:
        bare_child(args.bare_child)
        return

    from runner.isolation import Launcher
    from runner.records import utc_now

    load_before = os.getloadavg()
    null = null_loop_cost(args.null_iterations, args.null_repeats)
    launcher = Launcher()
    launcher.start()
    rounds = []
    for i in range(args.rounds):
        order = ("runner", "bare") if i % 2 == 0 else ("bare", "runner")
        row = {"order": list(order)}
        for side in order:
            row[side] = run_in_runner_process(launcher, args.calls) if side == "runner" else \
                run_in_bare_process(args.calls)
        row["ratio_median"] = row["runner"]["median_ms"] / row["bare"]["median_ms"]
        rounds.append(row)
        print(f"round {i}: runner {row['runner']['median_ms']:.4f} ms  bare {row['bare']['median_ms']:.4f} ms  "
              f"ratio {row['ratio_median']:.3f}", file=sys.stderr)
    ratios = [r["ratio_median"] for r in rounds]
    quiet = [i for i, r in enumerate(rounds) if max(r["runner"]["involuntary_ctx_switches"],
                                                    r["bare"]["involuntary_ctx_switches"]) <= QUIET_CS]
    import torch

    report = {
        "benchmark": "runner_process_vs_bare", "issue": "30 item 2",
        "step": f"{OPS} tiny tensor ops (x + 1.0 on torch.ones(8)) per call, {WARMUP} warm-up calls",
        "calls": args.calls, "rounds": args.rounds, "null_step_us_per_call": null,
        "rounds_detail": rounds,
        "ratio_median": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "quiet_rounds": {"rounds": quiet, "ratios": [round(rounds[i]["ratio_median"], 3) for i in quiet]},
        "runner_best_ms": min(min(r["runner"]["quarter_medians_ms"]) for r in rounds),
        "bare_best_ms": min(min(r["bare"]["quarter_medians_ms"]) for r in rounds),
        "runner_median_ms": statistics.median(r["runner"]["median_ms"] for r in rounds),
        "bare_median_ms": statistics.median(r["bare"]["median_ms"] for r in rounds),
        "machine": {"lscpu": lscpu(), "cores": os.cpu_count(), "torch": torch.__version__,
                    "python": sys.version.split()[0], "load_average_before": load_before,
                    "load_average_after": os.getloadavg(), "contention": contention()},
        "measured_at": utc_now(),
    }
    write(report, Path(args.out), describe, describe_contention)


def _q(side):
    return "(quarters " + "/".join(f"{q:.3f}" for q in side["quarter_medians_ms"]) + ")"


def write(report, out, describe, describe_contention):
    out.mkdir(parents=True, exist_ok=True)
    (out / "runner_process.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    null, machine = report["null_step_us_per_call"], report["machine"]
    lines = [
        "# Does the runner's process slow a launch-bound step? (issue 30 item 2, CPU)", "",
        describe(machine["lscpu"]),
        f"torch {machine['torch']}, Python {machine['python']}; load average before {machine['load_average_before']}, "
        f"after {machine['load_average_after']}; contention: {describe_contention(machine['contention'])}.",
        f"Measured {report['measured_at']}.", "",
        "## The timed loop's own cost, null step (us per call, interleaved repeats)", "",
        "| loop | min | median |", "| --- | ---: | ---: |",
        *(f"| {name} | {v['min']:.3f} | {v['median']:.3f} |" for name, v in null.items()), "",
        f"## Launch-bound step: {report['step']}; {report['calls']} timed calls per process, "
        f"{report['rounds']} rounds alternating which side goes first", "",
        "| round | order | runner median ms | bare median ms | runner/bare | runner gc (gen0,1,2) | bare gc | "
        "runner invol. cs | bare invol. cs | runner heap objects (not frozen) | bare heap objects | "
        "runner full gc ms | "
        "bare full gc ms |",
        "| ---: | --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for i, r in enumerate(report["rounds_detail"]):
        a, b = r["runner"], r["bare"]
        lines.append(f"| {i} | {'-'.join(r['order'])} | {a['median_ms']:.4f} {_q(a)} | {b['median_ms']:.4f} {_q(b)} | "
                     f"{r['ratio_median']:.3f} | {a['gc_collections']} | {b['gc_collections']} | "
                     f"{a['involuntary_ctx_switches']} | {b['involuntary_ctx_switches']} | {a['gc_objects']:,} | "
                     f"{b['gc_objects']:,} | {a['full_gc_ms']:.1f} | {b['full_gc_ms']:.1f} |")
    ratio = report["ratio_median"]
    first = report["rounds_detail"][0]
    quiet = report["quiet_rounds"]
    lines += ["", f"Median of the per-round ratios runner/bare: {ratio['median']:.3f} "
              f"(range {ratio['min']:.3f}-{ratio['max']:.3f}).",
              f"Rounds where neither process was preempted more than {QUIET_CS} times (the machine's other load "
              f"away): {quiet['rounds']}, ratios {quiet['ratios']}.",
              f"Least-disturbed level (the smallest quarter median of any process): runner "
              f"{report['runner_best_ms']:.4f} ms, bare {report['bare_best_ms']:.4f} ms.",
              f"Threads: runner {first['runner']['threads_torch']} torch / {first['runner']['os_threads']} OS, "
              f"bare {first['bare']['threads_torch']} / {first['bare']['os_threads']}; affinity runner "
              f"{first['runner']['affinity']}, bare {first['bare']['affinity']}; allocator/thread variables "
              f"runner {first['runner']['malloc_env']}, bare {first['bare']['malloc_env']}."]
    write_summary(out / "runner_process.md", lines)


if __name__ == "__main__":
    main()
