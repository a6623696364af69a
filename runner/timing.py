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


class _Loop(NamedTuple):
    samples_ms: List[float]
    output: Any             # the last call's output
    loop_wall_ms: float     # the whole loop, wall clock, synchronized before and after


class TimedLoop(_Loop):
    """A timed loop; unpacks as (samples_ms, output, loop_wall_ms). ``launch_ms``: on the GPU the CPU-side
    time of each call (the clock around the call, no synchronize: how long the host took to launch it);
    None on the CPU, where the sample is that time (runner.host)."""

    launch_ms: Optional[List[float]] = None

    @classmethod
    def of(cls, samples_ms, output, loop_wall_ms, launch_ms=None):
        loop = cls(samples_ms, output, loop_wall_ms)
        loop.launch_ms = launch_ms
        return loop


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
    return TimedLoop.of([s * 1000.0 for s in samples], output, loop_wall * 1000.0)


def _time_cuda(step, iterations, cuda, clock):
    starts = [cuda.Event(enable_timing=True) for _ in range(iterations)]
    ends = [cuda.Event(enable_timing=True) for _ in range(iterations)]
    launches = [0.0] * iterations   # the host's clock around each call: two reads and a store a call
    output = None
    cuda.synchronize()
    loop_start = clock()
    for start, end, i in zip(starts, ends, range(iterations)):
        output = None  # frees the previous output outside the timed region
        start.record()
        launched = clock()
        output = step()
        launches[i] = clock() - launched
        end.record()
    cuda.synchronize()
    loop_wall = clock() - loop_start
    samples = [start.elapsed_time(end) for start, end in zip(starts, ends)]
    launches = [launch * 1000.0 for launch in launches]
    return TimedLoop.of(samples, output, loop_wall * 1000.0, launches)


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


# --- past the fixed count (issue 32 item 4): a minimum duration and a noise criterion -------------------------
CHUNK_S = 0.25        # the extension runs in chunks of about this long (one synchronize after each)


def relative_standard_error(samples_ms):
    """stdev / (mean * sqrt(n)): how well the mean is known, relative (inf below 2 samples)."""
    if len(samples_ms) < 2:
        return math.inf
    mean = statistics.fmean(samples_ms)
    return statistics.stdev(samples_ms) / (mean * math.sqrt(len(samples_ms))) if mean > 0 else math.inf


def extend_loop(step, first, device, min_time_s=0.0, target_stdrel=None, max_time_s=10.0,
                time_loop=time_iterations):
    """Calls past the fixed count: on, in chunks of about CHUNK_S, until the whole loop (``first`` and the
    chunks) has lasted ``min_time_s`` (as NVBench's --min-time); then, with ``target_stdrel``, until the
    relative standard error of the mean of all calls is below it, or the loop has lasted ``max_time_s``.
    Returns (the chunks joined as one TimedLoop, or None when no call was added; why it stopped:
    "iterations", "min_time", "stdrel" or "max_time")."""
    samples, launches = list(first.samples_ms), list(first.launch_ms or [])
    elapsed_s = first.loop_wall_ms / 1000.0
    extra, extra_launch, wall_ms, output = [], [], 0.0, first.output
    reason = "iterations"

    def wanted():
        if elapsed_s < min_time_s:
            return "min_time"
        if target_stdrel is not None and elapsed_s < max_time_s and \
                relative_standard_error(samples) > target_stdrel:
            return "stdrel"
        return None

    while True:
        need = wanted()
        if need is None:
            if target_stdrel is not None and elapsed_s >= max_time_s:
                reason = "max_time"
            break
        reason = need
        per_call_s = max(elapsed_s / max(len(samples), 1), 1e-7)
        cap_s = min_time_s - elapsed_s if need == "min_time" else max_time_s - elapsed_s
        calls = max(1, min(int(CHUNK_S / per_call_s), int(math.ceil(max(cap_s, 0.0) / per_call_s)) or 1))
        output = None
        chunk = time_loop(step, calls, device)
        output = chunk.output
        samples += chunk.samples_ms
        extra += chunk.samples_ms
        if chunk.launch_ms:
            launches += chunk.launch_ms
            extra_launch += chunk.launch_ms
        elapsed_s += chunk.loop_wall_ms / 1000.0
        wall_ms += chunk.loop_wall_ms
    if not extra:
        return None, reason
    return TimedLoop.of(extra, output, wall_ms, extra_launch or None), reason


def extended_block(first, extra, reason, stdrel_target, min_time_s):
    """The record's ``timing.extended``: every call of the loop (the first N and the calls past them)."""
    samples = list(first.samples_ms) + (list(extra.samples_ms) if extra else [])
    ordered = sorted(samples)
    return {"n": len(samples), "extra_calls": len(extra.samples_ms) if extra else 0,
            "mean_ms": statistics.fmean(samples), "median_ms": percentile(ordered, 50),
            "loop_s": (first.loop_wall_ms + (extra.loop_wall_ms if extra else 0.0)) / 1000.0,
            "stop": reason, "min_time_s": min_time_s, "target_stdrel": stdrel_target,
            "stdrel": relative_standard_error(samples) if len(samples) > 1 else None,
            "extra_samples_ms": list(extra.samples_ms) if extra else []}
