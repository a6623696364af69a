"""What the host did to a timed loop (issue 32 item 1): the record's ``timing.host`` block. Stdlib only.

A launch-bound cell's number is partly the host's: on a rented VM single calls of 20-57 ms stood among
medians of 3-9 ms, and two processes of one cell differed by 25-70 %. So each record carries:

- ``launch_*``: the CPU-side time of each call (the clock around the call, no synchronize), beside the
  event time. ``launch_bound_share`` = median launch time / median event time, capped at 1: near 1 the GPU
  waited for the host (the call lasts as long as its launches), near 0 the host ran ahead (CUDA graphs,
  big batches). On the CPU the launch time *is* the call (share 1 by construction).
- ``stalls``: calls longer than ``stall_k`` times the median, how many and the share of the loop's time
  they took (``stall_share``); ``stall_laden`` when that share passes STALL_LADEN_SHARE.
- ``steal_share``: the hypervisor's steal over the loop, all CPUs, from ``/proc/stat`` (ticks stolen /
  all ticks); ``involuntary_ctx_switches`` / ``voluntary_ctx_switches``: this process's, from
  ``getrusage`` over the loop; ``cpu_share``: the process's CPU time / the loop's wall time;
  ``gc_collections``: Python's garbage collections over the loop, per generation.
- ``speed_ref_ms``: a fixed CPU workload (``speed_reference``, tens of ms: the median of a few pure-Python
  rounds) just before and just after the timed loop, so that two processes can be compared for the host
  they ran on; ``speed_change`` = after / before - 1.

``host_view(record)`` reads the block from any record: for records older than schema v4 the stall fields
are computed from ``samples_ms`` (they need nothing else), the launch, steal, context-switch and speed
fields are None (unknown: never guessed).
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

JSON = Dict[str, Any]

STALL_K = 3.0                 # a call beyond 3x the median is a stall
STALL_LADEN_SHARE = 0.05      # stalls took more than 5% of the loop's time
LAUNCH_BOUND_SHARE = 0.8      # median launch time >= 80% of the median event time: the GPU waits for the host
STEAL_SHARE = 0.02            # over 2% of the host's CPU time stolen by the hypervisor
SPEED_MOVED = 0.10            # the speed reference moved by more than 10% from before to after the loop
SPEED_ROUNDS = 11
SPEED_WORK = 20_000           # one round: ~2-6 ms of pure Python on a 2020s core


def _work(n: int = SPEED_WORK) -> int:
    total = 0
    for i in range(n):
        total = (total + i * i) % 1_000_003
    return total


def speed_reference(rounds: int = SPEED_ROUNDS, clock: Callable[[], float] = time.perf_counter) -> Optional[float]:
    """ms of one round of a fixed pure-Python workload: the median of ``rounds`` rounds (~1.5 ms each on this
    project's 2-core EPYC when quiet: tens of ms in all)."""
    times = []
    for _ in range(rounds):
        start = clock()
        _work()
        times.append((clock() - start) * 1000.0)
    return statistics.median(times) if times else None


def read_steal(path: str = "/proc/stat") -> Optional[List[int]]:
    """[steal ticks, all ticks] of the host's aggregate ``cpu`` line; None where /proc/stat is missing."""
    try:
        with open(path) as handle:
            line = handle.readline().split()
    except OSError:
        return None
    if not line or line[0] != "cpu" or len(line) < 9:
        return None
    ticks = [int(value) for value in line[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
    return [ticks[7], sum(ticks[:8])]


def _rusage() -> Optional[List[float]]:
    try:
        import resource
    except ImportError:   # not on this OS
        return None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return [usage.ru_nivcsw, usage.ru_nvcsw, usage.ru_utime + usage.ru_stime]


def _gc_collections() -> List[int]:
    import gc

    return [generation["collections"] for generation in gc.get_stats()]


@dataclass
class Snapshot:
    """The counters at one edge of the loop."""

    wall: float
    steal: Optional[List[int]]
    usage: Optional[List[float]]
    gc: Optional[List[int]] = None


def snapshot(clock: Callable[[], float] = time.perf_counter,
             read: Callable[[], Optional[List[int]]] = read_steal,
             usage: Callable[[], Optional[List[float]]] = _rusage) -> Snapshot:
    return Snapshot(clock(), read(), usage(), _gc_collections())


class Watch:
    """Around a timed loop: ``before()`` (speed reference, then counters), ``after()`` (counters, then
    the speed reference); ``block(samples_ms, launch_ms)`` gives the record's ``timing.host``."""

    def __init__(self, speed: Callable[[], Optional[float]] = speed_reference,
                 snap: Callable[[], Snapshot] = snapshot):
        self._speed, self._snap = speed, snap
        self.speed_before: Optional[float] = None
        self.speed_after: Optional[float] = None
        self.start: Optional[Snapshot] = None
        self.end: Optional[Snapshot] = None

    def before(self) -> None:
        self.speed_before = self._speed()
        self.start = self._snap()

    def after(self) -> None:
        self.end = self._snap()
        self.speed_after = self._speed()

    def block(self, samples_ms: Sequence[float], launch_ms: Optional[Sequence[float]], device: str) -> JSON:
        return host_block(samples_ms, launch_ms, device, self.start, self.end, self.speed_before, self.speed_after)


def stalls(samples_ms: Sequence[float], k: float = STALL_K) -> JSON:
    """Calls beyond k times the median: how many, their share of the calls and of the loop's time."""
    if not samples_ms:
        return {"stall_k": k, "stalls": None, "stall_share": None, "stall_calls_share": None, "stall_laden": None}
    median = statistics.median(samples_ms)
    limit = k * median
    over = [s for s in samples_ms if s > limit]
    total = math.fsum(samples_ms)
    share = math.fsum(over) / total if total > 0 else 0.0
    return {"stall_k": k, "stalls": len(over), "stall_share": share,
            "stall_calls_share": len(over) / len(samples_ms), "stall_laden": share > STALL_LADEN_SHARE}


def launch_fields(samples_ms: Sequence[float], launch_ms: Optional[Sequence[float]], device: str) -> JSON:
    """The launch times beside the event times (on the CPU the call itself: share 1)."""
    if device == "cpu" and samples_ms:
        median = statistics.median(samples_ms)
        return {"launch_median_ms": median, "launch_mean_ms": statistics.fmean(samples_ms),
                "launch_bound_share": 1.0, "launch_bound": True, "launch_samples_ms": None}
    if not launch_ms or not samples_ms:
        return {"launch_median_ms": None, "launch_mean_ms": None, "launch_bound_share": None,
                "launch_bound": None, "launch_samples_ms": None}
    share = launch_bound_share(samples_ms, launch_ms)
    return {"launch_median_ms": statistics.median(launch_ms), "launch_mean_ms": statistics.fmean(launch_ms),
            "launch_bound_share": share, "launch_bound": share is not None and share >= LAUNCH_BOUND_SHARE,
            "launch_samples_ms": list(launch_ms)}


def launch_bound_share(samples_ms: Sequence[float], launch_ms: Sequence[float]) -> Optional[float]:
    event = statistics.median(samples_ms)
    if event <= 0:
        return None
    return min(1.0, statistics.median(launch_ms) / event)


def host_block(samples_ms: Sequence[float], launch_ms: Optional[Sequence[float]], device: str,
               start: Optional[Snapshot], end: Optional[Snapshot],
               speed_before: Optional[float], speed_after: Optional[float]) -> JSON:
    block: JSON = {**launch_fields(samples_ms, launch_ms, device), **stalls(samples_ms)}
    wall = (end.wall - start.wall) if start and end else None
    steal = None
    if start and end and start.steal and end.steal:
        ticks = end.steal[1] - start.steal[1]
        steal = (end.steal[0] - start.steal[0]) / ticks if ticks > 0 else 0.0
    invol = vol = cpu_share = None
    if start and end and start.usage and end.usage:
        invol = int(end.usage[0] - start.usage[0])
        vol = int(end.usage[1] - start.usage[1])
        cpu_share = (end.usage[2] - start.usage[2]) / wall if wall else None
    change = speed_after / speed_before - 1.0 if speed_before and speed_after else None
    collections = [b - a for a, b in zip(start.gc, end.gc)] if start and end and start.gc and end.gc else None
    block.update(gc_collections=collections, steal_share=steal, involuntary_ctx_switches=invol,
                 voluntary_ctx_switches=vol, cpu_share=cpu_share,
                 loop_s=wall, speed_ref_ms={"before": speed_before, "after": speed_after}, speed_change=change,
                 host_steal=None if steal is None else steal > STEAL_SHARE,
                 speed_moved=None if change is None else abs(change) > SPEED_MOVED)
    return block


HOST_FIELDS = ("launch_median_ms", "launch_mean_ms", "launch_bound_share", "launch_bound", "stall_k", "stalls",
               "stall_share", "stall_calls_share", "stall_laden", "steal_share", "involuntary_ctx_switches",
               "voluntary_ctx_switches", "gc_collections", "cpu_share", "loop_s", "speed_ref_ms", "speed_change",
               "host_steal",
               "speed_moved")


def flags(block: Optional[Mapping[str, Any]]) -> List[str]:
    """timing.flags for what the host did: launch_bound, stall_laden, host_steal, host_speed_moved."""
    if not block:
        return []
    marks = (("launch_bound", "launch_bound"), ("stall_laden", "stall_laden"), ("host_steal", "host_steal"),
             ("speed_moved", "host_speed_moved"))
    return [flag for key, flag in marks if block.get(key)]


def host_view(record: Mapping[str, Any]) -> JSON:
    """The host fields of any record: its ``timing.host`` (schema v4), or for an older record the stall
    fields from its ``samples_ms`` and every other field None (unknown). ``{}`` without timing."""
    timing = record.get("timing") or {}
    if not timing:
        return {}
    block = timing.get("host")
    if isinstance(block, dict):
        return {**{key: None for key in HOST_FIELDS}, **block, "source": "record"}
    view: JSON = {key: None for key in HOST_FIELDS}
    samples = timing.get("samples_ms") or []
    view.update(stalls(samples))
    if record.get("device") == "cpu" and samples:
        view.update(launch_fields(samples, None, "cpu"))
    view.pop("launch_samples_ms", None)
    view["source"] = "samples_ms (record before schema v4: launch, steal, context switches, speed unknown)"
    return view
