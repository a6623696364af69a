"""Per-iteration timing and the statistics a record keeps.

GPU: a pair of CUDA events around each iteration, one synchronize at the end (no sync
per iteration, so the GPU queue stays full as in real inference), and the host's clock
around the call inside them (``launch_ms``: two clock reads, see runner.host). CPU: perf_counter
around each iteration. Both return raw samples in milliseconds; ``summarize`` turns
them into the record's ``timing`` statistics. (torch.utils.benchmark.Timer times blocks
of calls with a sync per block, so it gives no per-iteration samples: not used here.)

Self-check: the whole loop is also timed by the wall clock, with a synchronize before and
after it (``loop_wall_ms``). Its mean per call must agree with the per-iteration mean: on
GPU a disagreement beyond launch overhead means the events did not measure the model's work
(e.g. the work ran on another stream); on CPU the two agree by construction.

One output is alive at a time: the previous one is dropped before the next call starts (and
before its timer starts), so peak memory holds one output, not two.
"""
import math
import statistics
import time
from typing import Any, List, NamedTuple, Optional

# A wall mean further than this from the timer's mean (relative, plus an allowance per call
# for the event records and the Python loop around the step) flags the cell.
AGREEMENT_RELATIVE = 0.10
LAUNCH_ALLOWANCE_MS = 0.05


class TimedLoop(NamedTuple):
    samples_ms: List[float]
    output: Any             # the last call's output
    loop_wall_ms: float     # the whole loop, wall clock, synchronized before and after
    # GPU: the CPU-side time of each call (the clock around the call, no synchronize: how long the
    # host took to launch it); None on the CPU, where the sample is that time (runner.host)
    launch_ms: Optional[List[float]] = None


def time_iterations(step, iterations, device, cuda=None, clock=time.perf_counter):
    """Run ``step()`` ``iterations`` times. ``cuda`` (default torch.cuda) and ``clock`` are
    for tests: a fake CUDA module and a fake wall clock."""
    if device == "cuda":
        return _time_cuda(step, iterations, cuda or _torch_cuda(), clock)
    return _time_cpu(step, iterations, clock)


def _time_cpu(step, iterations, clock):
    samples = [0.0] * iterations
    output = None
    loop_start = clock()
    for i in range(iterations):
        output = None  # frees the previous output outside the timed region
        start = clock()
        output = step()
        samples[i] = clock() - start
    loop_wall = clock() - loop_start
    return TimedLoop([s * 1000.0 for s in samples], output, loop_wall * 1000.0)


def _time_cuda(step, iterations, cuda, clock):
    starts = [cuda.Event(enable_timing=True) for _ in range(iterations)]
    ends = [cuda.Event(enable_timing=True) for _ in range(iterations)]
    launches = [0.0] * iterations
    output = None
    cuda.synchronize()
    loop_start = clock()
    for i in range(iterations):
        output = None  # frees the previous output outside the timed region
        starts[i].record()
        launched = clock()
        output = step()
        launches[i] = clock() - launched
        ends[i].record()
    cuda.synchronize()
    loop_wall = clock() - loop_start
    samples = [start.elapsed_time(end) for start, end in zip(starts, ends)]
    return TimedLoop(samples, output, loop_wall * 1000.0, [s * 1000.0 for s in launches])


def _torch_cuda():
    import torch

    return torch.cuda


def self_check(mean_ms, loop_wall_ms, n):
    """The record's wall-clock fields: the loop's wall mean beside the timer's, and whether
    they disagree by more than launch overhead explains."""
    wall_mean = loop_wall_ms / n
    allowed = AGREEMENT_RELATIVE * mean_ms + LAUNCH_ALLOWANCE_MS
    return {"loop_wall_ms": loop_wall_ms, "wall_mean_ms": wall_mean,
            "timer_mismatch": abs(wall_mean - mean_ms) > allowed}


def flags(timing):
    return ["timer_mismatch"] if timing and timing.get("timer_mismatch") else []


def synchronize(device):
    """Wait for queued device work, so wall-clock phases (load, compile) are complete."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def percentile(sorted_samples, q):
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    if len(sorted_samples) == 1:
        return sorted_samples[0]
    rank = (len(sorted_samples) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(sorted_samples) - 1)
    return sorted_samples[low] + (sorted_samples[high] - sorted_samples[low]) * (rank - low)


def summarize(samples_ms, cv_threshold):
    """The record's latency statistics for raw samples (ms)."""
    if not samples_ms:
        raise ValueError("summarize needs at least one sample")
    ordered = sorted(samples_ms)
    mean = statistics.fmean(ordered)
    stdev = statistics.stdev(ordered) if len(ordered) > 1 else 0.0
    cv = stdev / mean if mean > 0 else 0.0
    return {
        "n": len(ordered),
        "mean_ms": mean,
        "median_ms": percentile(ordered, 50),
        "p90_ms": percentile(ordered, 90),
        "p99_ms": percentile(ordered, 99),
        "stdev_ms": stdev,
        "min_ms": ordered[0],
        "max_ms": ordered[-1],
        "cv": cv,
        "noisy": cv > cv_threshold,
        "samples_ms": list(samples_ms),
    }
