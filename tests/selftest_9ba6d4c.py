# The GPU part of runner/selftest.py as of commit 9ba6d4c (before issue 30), kept unchanged so the tests can
# show that its logic fails a healthy fake GPU whose clocks ramp, and that the present one passes it.
# ruff: noqa
"""``python -m runner.selftest --out FILE``: the measuring apparatus checked on this machine, through
the very timed loop the cells use (``runner.timing.time_iterations``), before hours are spent.

On a GPU (each check with its numbers and a stated tolerance):
- sleep kernel: ``torch.cuda._sleep(cycles)`` lasts cycles / SM clock; the clock is NVML's, read
  right after the loop; the loop's mean must be within SLEEP_TOLERANCE of it;
- matmul vs peak: a float16 matmul of known FLOPs; the achieved rate must lie between
  MATMUL_MIN_OF_PEAK of the GPU's published dense peak and the peak (above it, the timer under-measures);
- CUDA-graph replay: the sleep kernel captured in a CUDA graph and replayed through the loop: every
  replay counted (runner.cudagraphs), and its mean agrees with the eager one;
- events: the mean with per-iteration events agrees with one event pair around the whole loop;
- wall clock: the loop's wall-clock mean agrees with the events' (runner.timing.self_check);
- NVML: the GPU's total-energy counter moves across the loop.
On the CPU: a step of known duration (a busy wait) through the same loop, the per-iteration vs
whole-loop and wall-clock agreement; the GPU checks are listed as skipped, with why.
Every GPU dependency (torch.cuda, the CUDA-graph class, NVML, the clocks) comes through ``Apparatus``,
so tests run every branch against fakes.
"""
import argparse
import json
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
AGREEMENT = 0.02                 # relative, with vs without per-iteration events; graph vs eager
AGREEMENT_FLOOR_MS = 0.005
ITERATIONS = 50
CPU_STEP_MS = 2.0
CPU_TOLERANCE = 0.10             # relative, the median busy-wait step vs its duration
# Dense float16 tensor-core peaks (TFLOPS) from NVIDIA's data sheets, by a name fragment.
PEAK_FP16_TFLOPS = (("H100", 989.0), ("H200", 989.0), ("A100", 312.0), ("A10G", 70.0), ("L4", 121.0),
                    ("V100", 125.0), ("T4", 65.0))


@dataclass
class Check:
    name: str
    status: str                   # pass, fail, skipped
    detail: str
    numbers: dict = field(default_factory=dict)


@dataclass
class Apparatus:
    """What the selftest measures with: the real torch.cuda and NVML, or fakes."""

    device: str
    cuda: Any = None              # torch.cuda (Event, synchronize, _sleep, CUDAGraph, graph)
    nvml: Any = None              # an open runner.gpu_state.GpuMonitor-like object with .sample() and .energy_mj()
    gpu_name: Optional[str] = None
    matmul_step: Optional[Callable] = None
    clock: Callable = time.perf_counter


def run_selftest(apparatus: Apparatus, iterations: int = ITERATIONS) -> dict:
    if apparatus.device != "cuda":
        checks = cpu_checks(apparatus.clock, iterations)
        skipped = [Check(name, "skipped", "no GPU here: this is the CPU part") for name in GPU_CHECKS]
        return _result(apparatus, checks + skipped)
    return _result(apparatus, gpu_checks(apparatus, iterations))


GPU_CHECKS = ("sleep kernel", "matmul vs peak", "CUDA-graph replay", "events vs one event pair", "wall clock",
              "NVML counters")


def gpu_checks(apparatus, iterations):
    cuda, nvml = apparatus.cuda, apparatus.nvml
    energy_before = nvml.energy_mj() if nvml else None
    sleep = time_iterations(lambda: cuda._sleep(SLEEP_CYCLES), iterations, "cuda", cuda=cuda, clock=apparatus.clock)
    sample = nvml.sample() if nvml else None
    energy_after = nvml.energy_mj() if nvml else None
    mean = sum(sleep.samples_ms) / len(sleep.samples_ms)
    return [sleep_check(mean, (sample or {}).get("sm_clock_mhz")),
            matmul_check(apparatus, iterations),
            graph_check(apparatus, iterations, mean),
            events_check(apparatus, iterations, mean),
            wall_check(mean, sleep.loop_wall_ms, iterations),
            nvml_check(energy_before, energy_after)]


def sleep_check(mean_ms, sm_clock_mhz):
    if not sm_clock_mhz:
        return Check("sleep kernel", "skipped", "NVML gives no SM clock (pynvml missing), so the kernel's "
                     "duration is not known", {"mean_ms": mean_ms})
    expected = SLEEP_CYCLES / (sm_clock_mhz * 1e3)
    ratio = mean_ms / expected
    ok = abs(ratio - 1) <= SLEEP_TOLERANCE
    return Check("sleep kernel", "pass" if ok else "fail",
                 f"{SLEEP_CYCLES} cycles at {sm_clock_mhz:.0f} MHz should take {expected:.3f} ms; the timed loop "
                 f"measured {mean_ms:.3f} ms ({ratio:.3f}x, tolerance ±{SLEEP_TOLERANCE:.0%})",
                 {"cycles": SLEEP_CYCLES, "sm_clock_mhz": sm_clock_mhz, "expected_ms": expected, "mean_ms": mean_ms})


def matmul_check(apparatus, iterations):
    peak = peak_tflops(apparatus.gpu_name)
    if peak is None or apparatus.matmul_step is None:
        return Check("matmul vs peak", "skipped", f"no published float16 peak known for {apparatus.gpu_name!r}")
    loop = time_iterations(apparatus.matmul_step, max(iterations // 5, 5), "cuda", cuda=apparatus.cuda,
                           clock=apparatus.clock)
    mean_ms = sum(loop.samples_ms) / len(loop.samples_ms)
    achieved = 2 * MATMUL_N ** 3 / (mean_ms / 1e3) / 1e12
    share = achieved / peak
    ok = MATMUL_MIN_OF_PEAK <= share <= 1.0
    return Check("matmul vs peak", "pass" if ok else "fail",
                 f"float16 {MATMUL_N}^3 matmul: {mean_ms:.3f} ms, {achieved:.0f} TFLOPS = {share:.0%} of the "
                 f"{peak:.0f} TFLOPS peak (allowed {MATMUL_MIN_OF_PEAK:.0%}-100%; above the peak the timer "
                 "under-measures)", {"mean_ms": mean_ms, "tflops": achieved, "peak_tflops": peak, "share": share})


def graph_check(apparatus, iterations, eager_mean_ms):
    cuda = apparatus.cuda
    graph = cuda.CUDAGraph()
    with GraphCounter(cuda.CUDAGraph) as counter:
        with cuda.graph(graph):
            cuda._sleep(SLEEP_CYCLES)
        counter.timed()
        loop = time_iterations(graph.replay, iterations, "cuda", cuda=cuda, clock=apparatus.clock)
    counts = counter.summary()
    mean = sum(loop.samples_ms) / len(loop.samples_ms)
    agree = _agree(mean, eager_mean_ms)
    ok = counts["timed_replays"] == iterations and agree
    return Check("CUDA-graph replay", "pass" if ok else "fail",
                 f"{counts['timed_replays']} of {iterations} replays counted; replayed mean {mean:.3f} ms vs eager "
                 f"{eager_mean_ms:.3f} ms (tolerance ±{AGREEMENT:.0%})",
                 {"replays_counted": counts["timed_replays"], "iterations": iterations, "mean_ms": mean,
                  "eager_mean_ms": eager_mean_ms})


def events_check(apparatus, iterations, per_iteration_mean_ms):
    cuda = apparatus.cuda
    start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
    cuda.synchronize()
    start.record()
    for _ in range(iterations):
        cuda._sleep(SLEEP_CYCLES)
    end.record()
    cuda.synchronize()
    whole = start.elapsed_time(end) / iterations
    ok = _agree(per_iteration_mean_ms, whole)
    return Check("events vs one event pair", "pass" if ok else "fail",
                 f"per-iteration events {per_iteration_mean_ms:.3f} ms vs one pair around {iterations} calls "
                 f"{whole:.3f} ms (tolerance ±{AGREEMENT:.0%})",
                 {"per_iteration_ms": per_iteration_mean_ms, "one_pair_ms": whole})


def wall_check(mean_ms, loop_wall_ms, n):
    check = self_check(mean_ms, loop_wall_ms, n)
    return Check("wall clock", "fail" if check["timer_mismatch"] else "pass",
                 f"timer mean {mean_ms:.3f} ms vs wall-clock mean {check['wall_mean_ms']:.3f} ms "
                 "(runner.timing.self_check's allowance)", {"mean_ms": mean_ms, **check})


def nvml_check(before, after):
    if before is None or after is None:
        return Check("NVML counters", "fail", "NVML's total-energy counter cannot be read (pynvml missing, or a "
                     "driver/GPU without it): throttling and energy would go unrecorded; install nvidia-ml-py")
    moved = after > before
    return Check("NVML counters", "pass" if moved else "fail",
                 f"total energy {before} -> {after} mJ across the loop" + ("" if moved else ": it did not move"),
                 {"energy_before_mj": before, "energy_after_mj": after})


def cpu_checks(clock, iterations):
    def step():
        end = clock() + CPU_STEP_MS / 1e3
        while clock() < end:
            pass
    loop = time_iterations(step, iterations, "cpu", clock=clock)
    samples = sorted(loop.samples_ms)
    median = samples[len(samples) // 2]
    mean = sum(samples) / len(samples)
    ok = abs(median / CPU_STEP_MS - 1) <= CPU_TOLERANCE
    known = Check("CPU known-duration step", "pass" if ok else "fail",
                  f"a {CPU_STEP_MS} ms busy wait measured {median:.3f} ms (median; tolerance ±{CPU_TOLERANCE:.0%}; "
                  "a loaded machine stretches it)", {"expected_ms": CPU_STEP_MS, "median_ms": median, "mean_ms": mean})
    whole = loop.loop_wall_ms / iterations
    agree = _agree(mean, whole, relative=0.05)
    per_iteration = Check("CPU per-iteration vs whole loop", "pass" if agree else "fail",
                          f"per-iteration mean {mean:.3f} ms vs whole-loop mean {whole:.3f} ms (tolerance ±5%)",
                          {"per_iteration_ms": mean, "whole_loop_ms": whole})
    return [known, per_iteration]


def peak_tflops(gpu_name):
    for fragment, peak in PEAK_FP16_TFLOPS:
        if gpu_name and fragment in gpu_name:
            return peak
    return None


def _agree(a, b, relative=AGREEMENT):
    return abs(a - b) <= relative * max(a, b) + AGREEMENT_FLOOR_MS


def _result(apparatus, checks: List[Check]):
    ran = [c for c in checks if c.status != "skipped"]
    return {"device": apparatus.device, "gpu_name": apparatus.gpu_name,
            "passed": bool(ran) and all(c.status == "pass" for c in ran),
            "checks": [asdict(c) for c in checks],
            "skipped": [f"{c.name}: {c.detail}" for c in checks if c.status == "skipped"]}


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
