"""The host-noise probe (issue 32 item 3): a small launch-bound model's call-to-call jitter, measured in the
runner's environment (its torch, its device) for a few seconds, so the host can say before the bill what
change a comparison can resolve here.

``python -m runner.noise_probe --out FILE [--device auto|cpu|cuda] [--seconds S]`` (``doctor --measure``) and
``python -m runner --cells FILE --out DIR --noise-probe S`` (the start of a run: DIR/noise_probe.json) write::

    {"device", "gpu_name", "torch", "seconds", "host": {steal_share, involuntary_ctx_switches},
     "launch_bound": PROBE, "gpu_bound": PROBE or null, "gpu_bound_why": null or why it was not measured}

- ``launch_bound``: an eager chain of DEPTH tiny layers (Linear WIDTH x WIDTH and ReLU, 2 x DEPTH kernels) at
  batch 1, called back to back with a synchronize after each call, as a launch-bound cell's timed loop
  (eager and default at batch 1 on a GPU): per call the device time (CUDA events around the call; on the CPU
  the clock around it) and the CPU-side launch time (the clock around the call, no synchronize).
- ``gpu_bound``: on a GPU, the same chain captured in a CUDA graph and replayed (the host out of the loop, as
  reduce-overhead takes it out); on the CPU there is no such cell: null, with ``gpu_bound_why``.

A PROBE is ``{"calls", "samples_ms", "launch_ms" (null on the CPU: the call is its launch), "summary"}``;
``summarize`` (stdlib only: the host recomputes it from the raw samples) gives the summary: the calls'
jitter (CV), the stalls (runner.host.stalls: calls beyond 3x the median and the share of the time they
took), the launch-bound share (runner.host.launch_fields) and the wander between BLOCKS consecutive blocks
of calls (the CV of their means: a verdict judges a process's mean; their medians beside).
Only this module's ``probe`` imports torch.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from runner import host

PROBE_FILENAME = "noise_probe.json"
BLOCKS = 10
DEPTH = 24            # 48 small kernels a call: tens of microseconds of launches, little GPU work
WIDTH = 64
SECONDS = 8.0         # both probes together (the launch-bound one takes LAUNCH_SHARE of it on a GPU)
LAUNCH_SHARE = 0.7
WARMUP_CALLS = 20


def summarize(samples_ms: Sequence[float], launch_ms: Optional[Sequence[float]], device: str,
              blocks: int = BLOCKS) -> Dict[str, Any]:
    """The probe's numbers from its calls (see the module docstring); stdlib only."""
    samples = [float(value) for value in samples_ms]
    if not samples:
        return {"calls": 0, "median_ms": None, "mean_ms": None, "jitter_cv": None, "block_means_ms": [],
                "block_medians_ms": [], "block_cv": None, **host.stalls(samples),
                **_launch(samples, launch_ms, device)}
    count = max(1, min(blocks, len(samples)))
    size = len(samples) / count
    parts = [samples[int(round(i * size)):int(round((i + 1) * size))] for i in range(count)]
    means = [statistics.fmean(part) for part in parts if part]
    mean = statistics.fmean(samples)
    return {"calls": len(samples), "median_ms": statistics.median(samples), "mean_ms": mean,
            "jitter_cv": statistics.stdev(samples) / mean if len(samples) > 1 and mean > 0 else 0.0,
            "block_means_ms": means, "block_medians_ms": [statistics.median(part) for part in parts if part],
            "block_cv": _cv(means), **host.stalls(samples), **_launch(samples, launch_ms, device)}


def _cv(values: Sequence[float]) -> Optional[float]:
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean > 0 else None


def _launch(samples: List[float], launch_ms: Optional[Sequence[float]], device: str) -> Dict[str, Any]:
    fields = host.launch_fields(samples, list(launch_ms) if launch_ms else None, device)
    fields.pop("launch_samples_ms", None)   # the probe keeps them as its own launch_ms
    return fields


def probe(device: str = "auto", seconds: float = SECONDS) -> Dict[str, Any]:
    """Run both probes on ``device`` (auto: cuda when torch sees a GPU) for about ``seconds``; the result."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: torch sees no GPU")
    torch.manual_seed(0)
    layers: List[Any] = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(device).eval()
    return measure(torch, model, torch.randn(1, WIDTH, device=device), device, seconds)


def measure(torch: Any, model: Any, example: Any, device: str, seconds: float) -> Dict[str, Any]:
    """Both probes of ``model`` (called on ``example``) on ``device``, and the host's steal and preemptions over
    them: the result (see the module docstring)."""
    start = host.snapshot()
    cuda = device == "cuda"
    with torch.no_grad():
        eager, graph, why = _probes(torch, model, example, cuda, seconds)
    end = host.snapshot()
    steal = None
    if start.steal and end.steal and end.steal[1] > start.steal[1]:
        steal = (end.steal[0] - start.steal[0]) / (end.steal[1] - start.steal[1])
    invol = int(end.usage[0] - start.usage[0]) if start.usage and end.usage else None
    return {"device": device, "gpu_name": torch.cuda.get_device_name() if cuda else None,
            "torch": torch.__version__, "seconds": end.wall - start.wall, "depth": DEPTH, "width": WIDTH,
            "host": {"steal_share": steal, "involuntary_ctx_switches": invol},
            "launch_bound": _finish(eager, device), "gpu_bound": None if graph is None else _finish(graph, device),
            "gpu_bound_why": why}


def _probes(torch: Any, model: Any, example: Any, cuda: bool,
            seconds: float) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]], Optional[str]]:
    """(the launch-bound probe's loop, the GPU-bound one's or None, why that one was not measured). The
    launch-bound probe runs first and stands whatever follows: a CUDA graph that cannot be captured (or
    replayed) leaves the GPU-bound probe "not measured", with why, never the check."""
    eager = _loop(torch, lambda: model(example), cuda, seconds * (LAUNCH_SHARE if cuda else 1.0))
    if not cuda:
        return eager, None, "device cpu: no GPU, no CUDA graph to replay"
    try:
        replay = _graph(torch, model, example)
    except Exception as exc:   # a probe that cannot capture says why; the check goes on
        return eager, None, _why("the CUDA graph could not be captured", exc)
    try:
        return eager, _loop(torch, replay, True, seconds * (1.0 - LAUNCH_SHARE)), None
    except Exception as exc:
        return eager, None, _why("the captured CUDA graph could not be replayed", exc)


def _why(what: str, exc: BaseException) -> str:
    """``what``, the exception's type and the first line of its message (CUDA errors run to many lines)."""
    first = (str(exc).strip().splitlines() or [""])[0]
    first = first if len(first) <= 200 else first[:197] + "..."
    return f"{what}: {type(exc).__name__}" + (f": {first}" if first else "")


def _finish(loop: Dict[str, Any], device: str) -> Dict[str, Any]:
    return {**loop, "summary": summarize(loop["samples_ms"], loop["launch_ms"], device)}


def _graph(torch: Any, model: Any, example: Any) -> Any:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            model(example)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model(example)
    torch.cuda.synchronize()
    return graph.replay


def _loop(torch: Any, call: Any, cuda: bool, seconds: float) -> Dict[str, Any]:
    """Calls back to back for ``seconds`` (after WARMUP_CALLS): per call the device time and, on a GPU, the
    CPU-side launch time."""
    clock = time.perf_counter
    for _ in range(WARMUP_CALLS):
        call()
    if cuda:
        torch.cuda.synchronize()
    samples: List[float] = []
    launches: List[float] = []
    until = clock() + seconds
    if cuda:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        while not samples or clock() < until:
            begin.record()
            started = clock()
            call()
            launched = clock()
            end.record()
            end.synchronize()
            launches.append((launched - started) * 1000.0)
            samples.append(begin.elapsed_time(end))
        return {"calls": len(samples), "samples_ms": samples, "launch_ms": launches}
    while not samples or clock() < until:
        started = clock()
        call()
        samples.append((clock() - started) * 1000.0)
    return {"calls": len(samples), "samples_ms": samples, "launch_ms": None}


def write_probe(path: str, device: str = "auto", seconds: float = SECONDS) -> Dict[str, Any]:
    from runner.schema import write_json_atomic

    result = probe(device, seconds)
    write_json_atomic(path, result)
    return result


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runner.noise_probe",
                                     description="A small launch-bound model's jitter on this host (issue 32)")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--seconds", type=float, default=SECONDS)
    args = parser.parse_args(argv)
    result = write_probe(args.out, args.device, args.seconds)
    summary = result["launch_bound"]["summary"]
    print(f"noise probe: {result['device']}, {summary['calls']} calls of a launch-bound chain in "
          f"{result['seconds']:.1f} s, block CV {_percent(summary['block_cv'])}")
    return 0


def _percent(value: Optional[float]) -> str:
    return "unknown" if value is None or not math.isfinite(value) else f"{value:.1%}"


if __name__ == "__main__":
    raise SystemExit(main())
