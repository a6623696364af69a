"""``doctor --measure``'s host-noise check (issue 32 item 3): about 20 seconds spent measuring this host's noise
before the bill, and what change a comparison can resolve here. Stdlib only (runner.host's counters).

The check runs runner.host's fixed CPU workload (one round: a few ms of pure Python, what a launch-bound cell's
host does) back to back in ``blocks`` blocks: the blocks' medians wander as a launch-bound cell's level does
between processes (a lower bound: processes also land on different cores and heaps), rounds beyond 3x the
median are stalls, and /proc/stat and getrusage give the steal and the preemptions over the whole check.
The change a comparison of ``processes`` processes a side can resolve is t(0.975, 2n - 2) x sqrt(2 / n) x the
blocks' CV. GPU-bound cells (CUDA graphs, big batches) do not see the host: on the H100 two reduce-overhead
processes agreed to 0.1 %.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, List, Optional

from runner import host

# t(0.975, df) for df = 2n - 2, n processes a side (two-sided 95%)
T_975 = {2: 4.303, 4: 2.776, 6: 2.447, 8: 2.306, 10: 2.228}
UNDECIDED_PCT = 10.0    # a launch-bound change smaller than this is what comparisons usually look for


@dataclass
class HostNoise:
    seconds: float
    rounds: int
    block_medians_ms: List[float]
    block_cv: float
    stalls_per_1000: float
    steal_share: Optional[float]
    involuntary_ctx_switches: Optional[int]
    resolvable_pct: float
    processes: int

    def lines(self) -> List[str]:
        steal = "unknown" if self.steal_share is None else f"{self.steal_share:.1%}"
        out = [f"host noise ({self.seconds:.0f} s, {self.rounds} rounds of a fixed CPU workload in "
               f"{len(self.block_medians_ms)} blocks): steal {steal}, preempted "
               f"{self.involuntary_ctx_switches if self.involuntary_ctx_switches is not None else 'unknown'} times, "
               f"block medians vary by {self.block_cv:.1%} (CV), {self.stalls_per_1000:.1f} stalls per 1,000 rounds",
               f"  a comparison of {self.processes} processes a side resolves about {self.resolvable_pct:.1f}% here "
               "for launch-bound cells (eager and default at small batches); GPU-bound cells (reduce-overhead, "
               "big batches) are not moved by the host"]
        if self.resolvable_pct > UNDECIDED_PCT:
            out.append(f"  warning: launch-bound verdicts will mostly come out undecided on this host (it resolves "
                       f"{self.resolvable_pct:.0f}%, more than {UNDECIDED_PCT:.0f}%): what helps is reduce-overhead "
                       "(CUDA graphs take the host out of the loop), bigger batches, more repeats (--repeats, or "
                       "repeats auto), or a quieter machine")
        return out


def measure(seconds: float = 20.0, blocks: int = 10, processes: int = 3,
            work: Callable[[], object] = host._work, clock: Callable[[], float] = time.perf_counter,
            snap: Callable[[], host.Snapshot] = host.snapshot) -> HostNoise:
    start = snap()
    rounds: List[List[float]] = []
    for _ in range(blocks):
        block: List[float] = []
        until = clock() + seconds / blocks
        while not block or clock() < until:
            began = clock()
            work()
            block.append((clock() - began) * 1000.0)
        rounds.append(block)
    end = snap()
    medians = [statistics.median(block) for block in rounds]
    every = [value for block in rounds for value in block]
    median = statistics.median(every)
    stalls = sum(value > host.STALL_K * median for value in every)
    cv = statistics.stdev(medians) / statistics.fmean(medians) if len(medians) > 1 else 0.0
    steal = invol = None
    if start.steal and end.steal and end.steal[1] > start.steal[1]:
        steal = (end.steal[0] - start.steal[0]) / (end.steal[1] - start.steal[1])
    if start.usage and end.usage:
        invol = int(end.usage[0] - start.usage[0])
    return HostNoise(seconds, len(every), medians, cv, 1000.0 * stalls / len(every), steal, invol,
                     resolvable_pct(cv, processes), processes)


def resolvable_pct(cv: float, processes: int) -> float:
    """The smallest change (%) a comparison of ``processes`` processes a side resolves at this between-process CV."""
    t = T_975.get(2 * processes - 2, 1.96)
    return 100.0 * t * math.sqrt(2.0 / processes) * cv
