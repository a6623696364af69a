"""A launch-bound GPU loop of known truth, fitted to the H100 evidence (tests/data/gpu-evidence/h100-2026-11-26).

``fit(processes)`` reads per-process ``samples_ms`` (the records of one cell): each process's median level,
the spread of those levels between processes (log), the wander of block medians within a process (log),
the stall rate (calls beyond 3x the median per call) and the stalls' size (stall / median). ``simulate``
draws a process from them: a level, a block-wise wander, log-normal per-call noise, stalls at the fitted
rate; the launch time of each call is the call itself for a launch-bound cell (the host's time is the
call's: the H100 timelines' CPU-side launch mean was within 0.5% of the event mean) and a small share of
the GPU time where a CUDA graph takes the host out of the loop.

``FakeCuda`` is a fake ``torch.cuda`` for ``runner.timing``: a host clock and a GPU clock; a step spends
its launch time on the host and its GPU time on the GPU, which cannot finish before the last launch.
"""
from __future__ import annotations

import json
import math
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

EVIDENCE = Path(__file__).resolve().parent / "data" / "gpu-evidence" / "h100-2026-11-26"
RECORDS = EVIDENCE / "run-acc" / "acc" / "latest"


def load(name: str) -> dict:
    for folder in (RECORDS, EVIDENCE / "second"):
        if (folder / name).exists():
            return json.loads((folder / name).read_text())
    raise FileNotFoundError(name)


def timelines() -> List[dict]:
    return [json.loads(line) for line in (EVIDENCE / "second" / "independent_stall_timelines.jsonl").open()]


@dataclass
class Fit:
    level_ms: float           # the median of the processes' medians
    between_sigma: float      # log spread of the process medians
    wander_sigma: float       # log spread of block medians within a process
    noise_sigma: float        # per-call log noise, stalls left out
    stall_rate: float         # stalls per call
    stall_size: List[float]   # stall / median, as seen


def fit(processes: Sequence[Sequence[float]], block: int = 50, k: float = 3.0) -> Fit:
    medians = [statistics.median(p) for p in processes]
    logs = [math.log(m) for m in medians]
    between = statistics.pstdev(logs) if len(logs) > 1 else 0.0
    wander, noise, stalls, sizes, calls = [], [], 0, [], 0
    for samples, median in zip(processes, medians):
        blocks = [statistics.median(samples[i:i + block]) for i in range(0, len(samples) - block + 1, block)]
        if len(blocks) > 1:
            wander.append(statistics.pstdev([math.log(b) for b in blocks]))
        quiet = [math.log(s / median) for s in samples if s <= k * median]
        noise.append(statistics.pstdev(quiet))
        over = [s / median for s in samples if s > k * median]
        stalls, calls = stalls + len(over), calls + len(samples)
        sizes += over
    return Fit(statistics.median(medians), between, statistics.median(wander) if wander else 0.0,
               statistics.median(noise), stalls / calls, sizes or [8.0])


def simulate(fitted: Fit, n: int, rng: random.Random, launch_bound: bool = True, stall_rate: Optional[float] = None,
             level_ms: Optional[float] = None, graph_launch_share: float = 0.08, block: int = 50):
    """(samples_ms, launch_ms) of one simulated process."""
    level = (level_ms or fitted.level_ms) * math.exp(rng.gauss(0.0, fitted.between_sigma))
    rate = fitted.stall_rate if stall_rate is None else stall_rate
    samples, launches = [], []
    factor = 1.0
    for i in range(n):
        if i % block == 0:
            factor = math.exp(rng.gauss(0.0, fitted.wander_sigma))
        call = level * factor * math.exp(rng.gauss(0.0, fitted.noise_sigma))
        if rng.random() < rate:
            call = level * rng.choice(fitted.stall_size)
        samples.append(call)
        if launch_bound:
            launches.append(call * (1.0 - abs(rng.gauss(0.0, 0.004))))
        else:
            launches.append(level * graph_launch_share * math.exp(rng.gauss(0.0, 0.1)))
    return samples, launches


class FakeCuda:
    """A fake torch.cuda: events read a GPU clock; ``step_for(launch_ms, gpu_ms)`` makes steps that spend
    their launch on the host clock (``clock``) and their work on the GPU."""

    def __init__(self):
        self.host = 0.0    # seconds
        self.gpu = 0.0
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self):
                fake.gpu = max(fake.gpu, fake.host)
                self.at = fake.gpu

            def elapsed_time(self, other):
                return (other.at - self.at) * 1000.0

        self.Event = Event

    def synchronize(self):
        self.host = max(self.host, self.gpu)

    def clock(self):
        return self.host

    def step_for(self, launch_ms: Sequence[float], gpu_ms: Sequence[float]):
        calls = iter(zip(launch_ms, gpu_ms))

        def step():
            launch, work = next(calls)
            start = max(self.gpu, self.host)
            self.host += launch / 1000.0
            self.gpu = max(start + work / 1000.0, self.host)
            return None
        return step
