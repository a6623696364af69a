"""Per-iteration timing and the statistics a record keeps.

GPU: a pair of CUDA events around each iteration, one synchronize at the end (no sync
per iteration, so the GPU queue stays full as in real inference). CPU: perf_counter
around each iteration. Both return raw samples in milliseconds; ``summarize`` turns
them into the record's ``timing`` statistics. (torch.utils.benchmark.Timer times blocks
of calls with a sync per block, so it gives no per-iteration samples: not used here.)
"""
import math
import statistics
import time


def time_iterations(step, iterations, device):
    """Run ``step()`` ``iterations`` times; return (samples_ms, the last output)."""
    if device == "cuda":
        return _time_cuda(step, iterations)
    return _time_cpu(step, iterations)


def _time_cpu(step, iterations):
    clock = time.perf_counter
    samples = [0.0] * iterations
    output = None
    for i in range(iterations):
        start = clock()
        latest = step()
        samples[i] = clock() - start
        output = latest  # frees the previous output outside the timed region
    return [s * 1000.0 for s in samples], output


def _time_cuda(step, iterations):
    import torch

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    output = None
    for start, end in zip(starts, ends):
        start.record()
        latest = step()
        end.record()
        output = latest  # frees the previous output outside the timed region
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in zip(starts, ends)], output


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
