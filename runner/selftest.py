"""``python -m runner.selftest --out FILE``: the measuring apparatus checked on this machine, through
the very timed loop the cells use (``runner.timing.time_iterations``), before hours are spent.

Every check is independent of what ran before it (issue 30: on a GPU idle for minutes the first loop
ran while the clocks ramped, and a matmul timed without warm-up measured cuBLAS's set-up):
- first the GPU is warmed to steady clocks: sleep kernels for at least WARMUP_MIN_S, and until
  NVML's SM clock has stopped moving (within CLOCK_STEADY over the last CLOCK_WINDOW_S), at most
  WARMUP_MAX_S; a GPU whose clock never settles is reported, not failed on that alone;
- each kernel runs WARM_CALLS untimed calls before it is timed;
- a comparison of two loops alternates them (A B A B, ROUNDS blocks each), so a drift of the clocks
  falls on both sides alike.

On a GPU (each check with its numbers and a stated tolerance):
- sleep kernel: ``torch.cuda._sleep(cycles)`` lasts cycles / SM clock; the clock is NVML's, read
  before and after the loop; the loop's mean must be within SLEEP_TOLERANCE of it;
- matmul vs peak: a float16 matmul of known FLOPs, warmed; the median rate must lie between
  MATMUL_MIN_OF_PEAK of the GPU's published dense peak and the peak (above it, the timer under-measures);
- CUDA-graph replay: the sleep kernel captured in a CUDA graph and replayed through the loop,
  alternating with eager blocks: every replay counted (runner.cudagraphs), and its mean agrees with
  the eager one;
- events: the mean with per-iteration events agrees with one event pair around a whole block
  (alternating);
- wall clock: the loop's wall-clock mean agrees with the events' (runner.timing.self_check);
- NVML: the GPU's total-energy counter moves across the loop.
On the CPU: a step of known CPU time (a busy wait on the thread's own CPU clock) through the same loop.
The timer must measure at least the CPU time the step used (less: it under-measures, a failure) and
agree with the system's real-time clock across the loop (else it runs fast or slow, a failure); a step
that took longer than its CPU time on a timer that agrees is a loaded machine: a warning with the
share of the time other processes took, not a failure. The GPU checks are listed as skipped, with why.
A check fails only when the apparatus is wrong, and then its detail says what that means and what to do.
Every GPU dependency (torch.cuda, the CUDA-graph class, NVML, the clocks) comes through ``Apparatus``,
so tests run every branch against fakes.
"""
import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, List, Optional

from runner.cudagraphs import GraphCounter
from runner.timing import self_check, time_iterations

SLEEP_CYCLES = 10_000_000        # ~5-7 ms at 1.4-2 GHz
SLEEP_TOLERANCE = 0.05           # relative, measured mean vs cycles / SM clock
MATMUL_N = 8192                  # float16 n x n @ n x n: 2 n^3 FLOPs (1.1 TFLOP)
MATMUL_MIN_OF_PEAK = 0.25
MATMUL_WARM_CALLS = 10           # cuBLAS's heuristics, workspace and the first kernel's load, untimed
MATMUL_ITERATIONS = 20
AGREEMENT = 0.02                 # relative, with vs without per-iteration events; graph vs eager
AGREEMENT_FLOOR_MS = 0.005
ITERATIONS = 50
ROUNDS = 5                       # a comparison: A B A B ... ROUNDS blocks each, ITERATIONS // ROUNDS calls a block
WARM_CALLS = 5                   # untimed calls of each kernel before it is timed
WARMUP_MIN_S = 2.0               # as the cells' time-based warm-up, longer: the clocks must be up
WARMUP_MAX_S = 30.0
WARMUP_BATCH = 20                # sleep kernels between two readings of the SM clock
CLOCK_WINDOW_S = 1.0             # the SM clock's readings over the last second ...
CLOCK_STEADY = 0.01              # ... agree within this (relative): the clock is steady
CPU_STEP_MS = 2.0
CPU_TOLERANCE = 0.10             # relative, the median step on the timer vs the CPU time it used
CPU_REFERENCE_TOLERANCE = 0.05   # relative, the timer vs the real-time clock across the whole loop
CPU_REFERENCE_FLOOR_MS = 1.0
CPU_LOADED = 0.10                # others took more than this share of the time: a loaded machine
# Dense float16 tensor-core peaks (TFLOPS) from NVIDIA's data sheets, by a name fragment.
PEAK_FP16_TFLOPS = (("H100", 989.0), ("H200", 989.0), ("A100", 312.0), ("A10G", 70.0), ("L4", 121.0),
                    ("V100", 125.0), ("T4", 65.0))

# What a failed check means and what to do, appended to its detail.
MEANING = {
    "sleep kernel": "the events measure a kernel of known cycles at another duration than NVML's SM clock "
                    "gives: either the events time other work (another stream, another process on this GPU) "
                    "or NVML misreports the clock; check `nvidia-smi` for other processes and clock limits "
                    "(`nvidia-smi -q -d CLOCK,PERFORMANCE`) and run the selftest again",
    "matmul vs peak": "a warmed float16 matmul ran at a rate no sound timer gives on this GPU: above the peak "
                      "the events under-measure; far below it the GPU is throttled, shared or misidentified; "
                      "check `nvidia-smi -q -d PERFORMANCE` (throttle reasons) and other processes",
    "CUDA-graph replay": "replays the counter did not see go unrecorded (the record's CUDA-graph proof would be "
                         "wrong), or a replayed kernel timed unlike the same kernel launched eagerly, alternating "
                         "with it: the timer does not time graph replays; report it with selftest.json",
    "events vs one event pair": "per-iteration events and one pair around the same calls, alternating, disagree: "
                                "the per-iteration events add or lose time; report it with selftest.json",
    "wall clock": "the host's wall clock and the events disagree beyond launch overhead: one of the two "
                  "clocks is wrong, or the loop waits for the host; report it with selftest.json",
    "CPU known-duration step": "the timer (time.perf_counter) disagrees with the thread's own CPU time or with "
                               "the real-time clock: it is broken on this machine (a VM clock source? check "
                               "/sys/devices/system/clocksource/clocksource0/current_clocksource); no timing "
                               "taken here can be trusted",
    "CPU per-iteration vs whole loop": "per-iteration timings do not add up to the whole loop on an idle "
                                       "machine: the loop loses time between iterations; report it with "
                                       "selftest.json",
}


@dataclass
class Check:
    name: str
    status: str                   # pass, warning, fail, skipped
    detail: str
    numbers: dict = field(default_factory=dict)


def _judged(name, ok, detail, numbers):
    if ok:
        return Check(name, "pass", detail, numbers)
    return Check(name, "fail", f"{detail}. What it means: {MEANING[name]}", numbers)


@dataclass
class Apparatus:
    """What the selftest measures with: the real torch.cuda and NVML, or fakes."""

    device: str
    cuda: Any = None              # torch.cuda (Event, synchronize, _sleep, CUDAGraph, graph)
    nvml: Any = None              # an open runner.gpu_state.GpuMonitor-like object with .sample() and .energy_mj()
    gpu_name: Optional[str] = None
    matmul_step: Optional[Callable] = None
    clock: Callable = time.perf_counter       # the timer under test (the timed loop's)
    cpu_clock: Callable = time.thread_time    # this thread's CPU time (the CPU part)
    reference_clock: Callable = time.time     # a second clock, real time (the CPU part)


def run_selftest(apparatus: Apparatus, iterations: int = ITERATIONS) -> dict:
    if apparatus.device != "cuda":
        checks = cpu_checks(apparatus, iterations)
        skipped = [Check(name, "skipped", "no GPU here: this is the CPU part") for name in GPU_CHECKS]
        return _result(apparatus, checks + skipped)
    warm = warm_to_steady_clocks(apparatus)
    return _result(apparatus, gpu_checks(apparatus, iterations), warm)


GPU_CHECKS = ("sleep kernel", "matmul vs peak", "CUDA-graph replay", "events vs one event pair", "wall clock",
              "NVML counters")


def _sm_clock(nvml):
    return (nvml.sample() or {}).get("sm_clock_mhz") if nvml else None


def warm_to_steady_clocks(apparatus: Apparatus) -> dict:
    """Sleep kernels until WARMUP_MIN_S have passed and NVML's SM clock is steady (its readings over
    the last CLOCK_WINDOW_S within CLOCK_STEADY), at most WARMUP_MAX_S. Without NVML, by time alone."""
    cuda, clock = apparatus.cuda, apparatus.clock
    cuda.synchronize()
    start = clock()
    readings: List[tuple] = []     # (seconds since start, MHz)
    steady: Optional[bool] = None
    while True:
        for _ in range(WARMUP_BATCH):
            cuda._sleep(SLEEP_CYCLES)
        cuda.synchronize()
        elapsed = clock() - start
        mhz = _sm_clock(apparatus.nvml)
        if mhz:
            readings.append((elapsed, float(mhz)))
            window = [m for at, m in readings if at >= elapsed - CLOCK_WINDOW_S]
            steady = (readings[0][0] <= elapsed - CLOCK_WINDOW_S
                      and max(window) - min(window) <= CLOCK_STEADY * max(window))
        if elapsed >= WARMUP_MIN_S and steady is not False:
            break
        if elapsed >= WARMUP_MAX_S:
            break
    return {"warmup_s": elapsed, "sm_clock_steady": steady, "sm_clock_mhz": readings[-1][1] if readings else None,
            "sm_clock_readings": len(readings)}


def _mean(samples):
    return sum(samples) / len(samples)


def _warm(step, calls, cuda):
    for _ in range(calls):
        step()
    cuda.synchronize()


def gpu_checks(apparatus, iterations):
    cuda, nvml = apparatus.cuda, apparatus.nvml

    def sleep():
        cuda._sleep(SLEEP_CYCLES)
    _warm(sleep, WARM_CALLS, cuda)
    energy_before = nvml.energy_mj() if nvml else None
    clock_before = _sm_clock(nvml)
    loop = time_iterations(sleep, iterations, "cuda", cuda=cuda, clock=apparatus.clock)
    clock_after = _sm_clock(nvml)
    energy_after = nvml.energy_mj() if nvml else None
    mean = _mean(loop.samples_ms)
    return [sleep_check(mean, clock_before, clock_after),
            matmul_check(apparatus),
            graph_check(apparatus, iterations),
            events_check(apparatus, iterations),
            wall_check(mean, loop.loop_wall_ms, iterations),
            nvml_check(energy_before, energy_after)]


def sleep_check(mean_ms, mhz_before, mhz_after=None):
    readings = [m for m in (mhz_before, mhz_after) if m]
    if not readings:
        return Check("sleep kernel", "skipped", "NVML gives no SM clock (pynvml missing), so the kernel's "
                     "duration is not known", {"mean_ms": mean_ms})
    sm_clock_mhz = _mean(readings)
    expected = SLEEP_CYCLES / (sm_clock_mhz * 1e3)
    ratio = mean_ms / expected
    ok = abs(ratio - 1) <= SLEEP_TOLERANCE
    moved = len(readings) == 2 and abs(readings[0] - readings[1]) > CLOCK_STEADY * max(readings)
    return _judged("sleep kernel", ok,
                   f"{SLEEP_CYCLES} cycles at {sm_clock_mhz:.0f} MHz should take {expected:.3f} ms; the timed "
                   f"loop measured {mean_ms:.3f} ms ({ratio:.3f}x, tolerance ±{SLEEP_TOLERANCE:.0%})"
                   + (f"; the SM clock moved from {readings[0]:.0f} to {readings[1]:.0f} MHz during the loop"
                      if moved else ""),
                   {"cycles": SLEEP_CYCLES, "sm_clock_mhz": sm_clock_mhz, "sm_clock_mhz_before": mhz_before,
                    "sm_clock_mhz_after": mhz_after, "expected_ms": expected, "mean_ms": mean_ms})


def matmul_check(apparatus):
    peak = peak_tflops(apparatus.gpu_name)
    if peak is None or apparatus.matmul_step is None:
        return Check("matmul vs peak", "skipped", f"no published float16 peak known for {apparatus.gpu_name!r}")
    _warm(apparatus.matmul_step, MATMUL_WARM_CALLS, apparatus.cuda)
    loop = time_iterations(apparatus.matmul_step, MATMUL_ITERATIONS, "cuda", cuda=apparatus.cuda,
                           clock=apparatus.clock)
    median_ms = statistics.median(loop.samples_ms)
    achieved = 2 * MATMUL_N ** 3 / (median_ms / 1e3) / 1e12
    share = achieved / peak
    ok = MATMUL_MIN_OF_PEAK <= share <= 1.0
    return _judged("matmul vs peak", ok,
                   f"float16 {MATMUL_N}^3 matmul after {MATMUL_WARM_CALLS} untimed calls: median {median_ms:.3f} ms "
                   f"of {MATMUL_ITERATIONS}, {achieved:.0f} TFLOPS = {share:.0%} of the {peak:.0f} TFLOPS peak "
                   f"(allowed {MATMUL_MIN_OF_PEAK:.0%}-100%; above the peak the timer under-measures)",
                   {"median_ms": median_ms, "mean_ms": _mean(loop.samples_ms), "warm_calls": MATMUL_WARM_CALLS,
                    "tflops": achieved, "peak_tflops": peak, "share": share})


def _block(iterations):
    return max(iterations // ROUNDS, 1)


def graph_check(apparatus: Apparatus, iterations: int) -> Check:
    """The sleep kernel replayed from a CUDA graph against the same kernel launched eagerly, in
    alternating blocks (eager, graph, eager, graph, ...), each warmed first."""
    cuda, clock = apparatus.cuda, apparatus.clock
    block = _block(iterations)
    graph = cuda.CUDAGraph()

    def eager():
        cuda._sleep(SLEEP_CYCLES)
    eager_samples: List[float] = []
    graph_samples: List[float] = []
    with GraphCounter(cuda.CUDAGraph) as counter:
        with cuda.graph(graph):
            cuda._sleep(SLEEP_CYCLES)
        _warm(graph.replay, WARM_CALLS, cuda)
        _warm(eager, WARM_CALLS, cuda)
        counter.timed()
        for _ in range(ROUNDS):
            eager_samples += time_iterations(eager, block, "cuda", cuda=cuda, clock=clock).samples_ms
            graph_samples += time_iterations(graph.replay, block, "cuda", cuda=cuda, clock=clock).samples_ms
    counts = counter.summary()
    timed = block * ROUNDS
    mean, eager_mean = _mean(graph_samples), _mean(eager_samples)
    ok = counts["timed_replays"] == timed and _agree(mean, eager_mean)
    return _judged("CUDA-graph replay", ok,
                   f"{counts['timed_replays']} of {timed} replays counted; replayed mean {mean:.3f} ms vs eager "
                   f"{eager_mean:.3f} ms, alternating in {ROUNDS} blocks of {block} (tolerance ±{AGREEMENT:.0%})",
                   {"replays_counted": counts["timed_replays"], "iterations": timed, "mean_ms": mean,
                    "eager_mean_ms": eager_mean, "rounds": ROUNDS})


def events_check(apparatus: Apparatus, iterations: int) -> Check:
    """Per-iteration events (the timed loop) against one event pair around a block of the same
    calls, in alternating blocks."""
    cuda, clock = apparatus.cuda, apparatus.clock
    block = _block(iterations)

    def sleep():
        cuda._sleep(SLEEP_CYCLES)

    def one_pair():
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        cuda.synchronize()
        start.record()
        for _ in range(block):
            sleep()
        end.record()
        cuda.synchronize()
        return start.elapsed_time(end)
    _warm(sleep, WARM_CALLS, cuda)
    per_iteration: List[float] = []
    whole = 0.0
    for _ in range(ROUNDS):
        per_iteration += time_iterations(sleep, block, "cuda", cuda=cuda, clock=clock).samples_ms
        whole += one_pair()
    per_iteration_mean = _mean(per_iteration)
    one_pair_mean = whole / (block * ROUNDS)
    ok = _agree(per_iteration_mean, one_pair_mean)
    return _judged("events vs one event pair", ok,
                   f"per-iteration events {per_iteration_mean:.3f} ms vs one pair around {block} calls "
                   f"{one_pair_mean:.3f} ms, alternating in {ROUNDS} blocks (tolerance ±{AGREEMENT:.0%})",
                   {"per_iteration_ms": per_iteration_mean, "one_pair_ms": one_pair_mean, "rounds": ROUNDS})


def wall_check(mean_ms, loop_wall_ms, n):
    check = self_check(mean_ms, loop_wall_ms, n)
    return _judged("wall clock", not check["timer_mismatch"],
                   f"timer mean {mean_ms:.3f} ms vs wall-clock mean {check['wall_mean_ms']:.3f} ms "
                   "(runner.timing.self_check's allowance)", {"mean_ms": mean_ms, **check})


def nvml_check(before, after):
    if before is None or after is None:
        return Check("NVML counters", "fail", "NVML's total-energy counter cannot be read (pynvml missing, or a "
                     "driver/GPU without it): throttling and energy would go unrecorded; install nvidia-ml-py")
    moved = after > before
    return Check("NVML counters", "pass" if moved else "fail",
                 f"total energy {before} -> {after} mJ across the loop" + (
                     "" if moved else ": it did not move, so the records' energy would read zero; update the "
                     "driver or run without energy figures"),
                 {"energy_before_mj": before, "energy_after_mj": after})


def cpu_checks(apparatus, iterations):
    clock, cpu_clock, reference = apparatus.clock, apparatus.cpu_clock, apparatus.reference_clock

    def step():
        end = cpu_clock() + CPU_STEP_MS / 1e3
        while cpu_clock() < end:
            pass
    step()   # warm: the first call's page faults and caches, untimed
    cpu_start, reference_start = cpu_clock(), reference()
    loop = time_iterations(step, iterations, "cpu", clock=clock)
    cpu_ms, reference_ms = (cpu_clock() - cpu_start) * 1e3, (reference() - reference_start) * 1e3
    samples = sorted(loop.samples_ms)
    median = statistics.median(samples)
    mean = _mean(samples)
    ratio = median / CPU_STEP_MS
    others = max(0.0, 1 - cpu_ms / loop.loop_wall_ms) if loop.loop_wall_ms > 0 else 0.0
    numbers = {"expected_ms": CPU_STEP_MS, "median_ms": median, "mean_ms": mean, "loop_ms": loop.loop_wall_ms,
               "cpu_ms": cpu_ms, "reference_ms": reference_ms, "others_share": others}
    head = (f"a step of {CPU_STEP_MS} ms of this thread's CPU time measured {median:.3f} ms on the timer (median, "
            f"{ratio:.2f}x); across the loop the timer read {loop.loop_wall_ms:.1f} ms, the real-time clock "
            f"{reference_ms:.1f} ms, this thread's CPU time {cpu_ms:.1f} ms")
    reference_agrees = abs(loop.loop_wall_ms - reference_ms) <= (CPU_REFERENCE_TOLERANCE * reference_ms
                                                                  + CPU_REFERENCE_FLOOR_MS)
    if ratio < 1 - CPU_TOLERANCE:
        known = _judged("CPU known-duration step", False, f"{head}: the timer measured less time than the step "
                        "used on the CPU, which no sound timer does", numbers)
    elif not reference_agrees:
        known = _judged("CPU known-duration step", False, f"{head}: the timer and the real-time clock disagree "
                        f"beyond ±{CPU_REFERENCE_TOLERANCE:.0%}", numbers)
    elif ratio > 1 + CPU_TOLERANCE or others > CPU_LOADED:
        known = Check("CPU known-duration step", "warning",
                      f"{head}: the timer agrees with the real-time clock and measured no less than the CPU time, "
                      f"so it is right; the machine is loaded: other processes took {others:.0%} of the time, and "
                      "CPU timings taken now are slower and noisier than this machine's (run when it is idle)",
                      numbers)
    else:
        known = Check("CPU known-duration step", "pass", f"{head} (tolerance ±{CPU_TOLERANCE:.0%})", numbers)
    whole = loop.loop_wall_ms / iterations
    agree = _agree(mean, whole, relative=0.05)
    detail = f"per-iteration mean {mean:.3f} ms vs whole-loop mean {whole:.3f} ms (tolerance ±5%)"
    numbers = {"per_iteration_ms": mean, "whole_loop_ms": whole}
    if not agree and others > CPU_LOADED:
        per_iteration = Check("CPU per-iteration vs whole loop", "warning",
                              f"{detail}: on a loaded machine (others took {others:.0%} of the time) the gaps "
                              "between iterations are others' time, not the timer's", numbers)
    else:
        per_iteration = _judged("CPU per-iteration vs whole loop", agree, detail, numbers)
    return [known, per_iteration]


def peak_tflops(gpu_name):
    for fragment, peak in PEAK_FP16_TFLOPS:
        if gpu_name and fragment in gpu_name:
            return peak
    return None


def _agree(a, b, relative=AGREEMENT):
    return abs(a - b) <= relative * max(a, b) + AGREEMENT_FLOOR_MS


def _result(apparatus, checks: List[Check], warmup=None):
    ran = [c for c in checks if c.status != "skipped"]
    result = {"device": apparatus.device, "gpu_name": apparatus.gpu_name,
              "passed": bool(ran) and all(c.status in ("pass", "warning") for c in ran),
              "checks": [asdict(c) for c in checks],
              "skipped": [f"{c.name}: {c.detail}" for c in checks if c.status == "skipped"],
              "warnings": [f"{c.name}: {c.detail}" for c in checks if c.status == "warning"]}
    if warmup is not None:
        result["warmup"] = warmup
    return result


def real_apparatus(device):
    """The real torch.cuda, NVML and a float16 matmul on this machine's GPU 0."""
    import torch

    if device != "cuda":
        return Apparatus("cpu")
    from runner.gpu_state import open_monitor

    monitor = open_monitor("cuda")
    a = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.float16)
    b = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.float16)
    return Apparatus("cuda", cuda=torch.cuda, nvml=_EnergyMonitor(monitor) if monitor else None,
                     gpu_name=torch.cuda.get_device_name(0), matmul_step=lambda: torch.matmul(a, b))


class _EnergyMonitor:
    """A GpuMonitor plus NVML's total-energy counter (mJ since the driver loaded)."""

    def __init__(self, monitor):
        self._monitor = monitor

    def sample(self):
        return self._monitor.sample()

    def energy_mj(self):
        return self._monitor._ask("nvmlDeviceGetTotalEnergyConsumption")


def describe(result):
    lines = [f"selftest on {result['gpu_name'] or result['device']}: {'PASS' if result['passed'] else 'FAIL'}"]
    warm = result.get("warmup")
    if warm:
        clock = f", SM clock {warm['sm_clock_mhz']:.0f} MHz" if warm.get("sm_clock_mhz") else ""
        steady = {True: " (steady)", False: " (NOT steady: the checks below ran on moving clocks)",
                  None: " (no NVML clock: warmed by time alone)"}[warm.get("sm_clock_steady")]
        lines.append(f"  warmed {warm['warmup_s']:.1f} s{clock}{steady}")
    for check in result["checks"]:
        lines.append(f"  [{check['status'].upper():7}] {check['name']}: {check['detail']}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m runner.selftest")
    parser.add_argument("--out", required=True, help="where to write the result (JSON)")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    args = parser.parse_args(argv)
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    result = run_selftest(real_apparatus(device))
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    print(describe(result))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
