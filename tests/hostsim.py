"""A host simulator for launch-bound cells, fitted to the H100 evidence (issue 34).

The GPU waits for the host in launch-bound cells (eager and default at batch 1), so what a process
records is the host's doing: stall episodes (single calls of 20-57 ms among 3-9 ms ones), a host that
wanders between a fast and a slow state for fractions of a second, and a level each process keeps
(memory layout, the cores it got). ``fit`` measures those from the records' ``samples_ms``
(``/work/shared/gpu-evidence/h100-2026-11-26``, or ``MATRIXBENCH_H100_EVIDENCE``); ``Host`` carries
the numbers and draws calls with them; ``check_fit`` runs the simulator through the same measuring
code and sets the two side by side (tests/test_hostsim.py holds them to it).

Drawing a process: the host state alternates in wall time (exponential dwells, slow calls take
``slow_factor`` x as long); a call's wall time is found by integrating the state's speed over its
work (np.interp over the state timeline, so a call straddling a switch is charged both); stall
episodes arrive as a Poisson process in wall time and add their cost to the call they land in; the
process's level is exp(N(0, residual_sd)); each call has a small lognormal jitter. Eager and compiled
blocks measured alternately in one process (``paired_blocks``) share the same host timeline.
Shared by tests (``import hostsim``) and benchmarks (tests/ on sys.path).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from scipy.ndimage import median_filter

EVIDENCE = Path(os.environ.get("MATRIXBENCH_H100_EVIDENCE", "/work/shared/gpu-evidence/h100-2026-11-26"))
STALL_FACTOR = 2.0       # a call over 2x the local median (51 calls) is a stall call
EPISODE_GAP_S = 0.15     # stall calls closer than this in wall time are one episode
LEVEL_WINDOW = 15        # calls in the rolling median that tracks the host's state
JITTER = 0.03            # per-call lognormal jitter (log-SD) around the state's level


@dataclass(frozen=True)
class Host:
    stall_rate_per_s: float       # stall episodes per wall second
    stall_cost_ms: float          # mean extra ms an episode adds (exponential around it)
    slow_factor: float            # slow state's call time / fast state's
    slow_share: float             # share of wall time in the slow state
    dwell_s: float                # mean dwell in a state (both states' mean, wall seconds)
    residual_sd: float            # process level: log-SD of exp(N(0, sd)) per process
    warmup_calls: int = 0         # the first calls of a process slower by warmup_extra (decaying)
    warmup_extra: float = 0.0

    @property
    def dwell_slow_s(self) -> float:
        return 2.0 * self.dwell_s * self.slow_share

    @property
    def dwell_fast_s(self) -> float:
        return 2.0 * self.dwell_s * (1.0 - self.slow_share)

    def calls(self, rng: np.random.Generator, work_ms: np.ndarray, level: Optional[float] = None) -> np.ndarray:
        """One process: the wall ms of calls whose fast-state durations are ``work_ms`` (ms each)."""
        work_ms = np.asarray(work_ms, dtype=float)
        level = math.exp(rng.normal(0.0, self.residual_sd)) if level is None else level
        jitter = np.exp(rng.normal(0.0, JITTER, work_ms.size))
        work = work_ms * level * jitter
        if self.warmup_calls:
            work = work * (1.0 + self.warmup_extra * np.exp(-np.arange(work.size) / self.warmup_calls))
        total = float(work.sum()) * max(self.slow_factor, 1.0) * 1.2 + 1000.0
        # the state timeline: alternating dwells (ms), stationary start
        slow = rng.random() < self.slow_share
        edges_t, edges_w, t, w = [0.0], [0.0], 0.0, 0.0
        while t < total:
            dwell = rng.exponential(1000.0 * (self.dwell_slow_s if slow else self.dwell_fast_s))
            t += dwell
            w += dwell / (self.slow_factor if slow else 1.0)
            edges_t.append(t)
            edges_w.append(w)
            slow = not slow
        finish = np.interp(np.cumsum(work), edges_w, edges_t)
        starts = np.concatenate(([0.0], finish[:-1]))
        wall = finish - starts
        # stall episodes in wall time, each added to the call it lands in
        count = rng.poisson(self.stall_rate_per_s * finish[-1] / 1000.0)
        if count:
            where = np.searchsorted(finish, rng.uniform(0.0, finish[-1], count))
            np.add.at(wall, np.minimum(where, wall.size - 1), rng.exponential(self.stall_cost_ms, count))
        return wall

    def process(self, rng: np.random.Generator, base_ms: float, calls: int) -> np.ndarray:
        return self.calls(rng, np.full(calls, base_ms))

    def paired_blocks(self, rng: np.random.Generator, eager_ms: float, compiled_ms: float, calls: int,
                      block: int) -> List[Tuple[float, float]]:
        """One process measuring eager and compiled in alternating blocks of ``block`` calls (``calls``
        of each in all): the (eager ms, compiled ms) block means, as the runner's paired_blocks."""
        blocks = max(1, calls // block)
        work = np.concatenate([np.full(block, ms) for _ in range(blocks) for ms in (eager_ms, compiled_ms)])
        wall = self.calls(rng, work).reshape(blocks, 2, block).mean(axis=2)
        return [(float(e), float(c)) for e, c in wall]


def lognormal(sd: float) -> Host:
    """Today's model beside it: no stalls, no states, a lognormal process level of log-SD ``sd``."""
    return Host(0.0, 0.0, 1.0, 0.0, 1.0, sd)


# --- measuring: the same code reads the evidence and the simulator's output --------------------------

def measure(samples: Sequence[float]) -> Dict[str, float]:
    """One process's host quantities from its samples (ms): stall episodes and their cost, the wall
    seconds, and the state-level trace (stall-free rolling median) for the two-state split."""
    s = np.asarray(samples, dtype=float)
    local = median_filter(s, size=51, mode="nearest")
    stall = s > STALL_FACTOR * local
    finish = np.cumsum(s) / 1000.0
    episodes, excess, last = 0, float(np.sum((s - local)[stall])), -1.0
    for at in finish[stall]:
        if at - last > EPISODE_GAP_S:
            episodes += 1
        last = at
    level = median_filter(np.where(stall, local, s), size=LEVEL_WINDOW, mode="nearest")
    return {"seconds": float(finish[-1]), "episodes": episodes, "excess_ms": excess,
            "level": level, "wall": s, "mean": float(s.mean())}


def two_state(levels: Sequence[np.ndarray], walls: Sequence[np.ndarray]) -> Dict[str, float]:
    """The two-state split pooled over processes: each process's levels over its fast level (10th
    percentile), a threshold iterated to the geometric midpoint of the two states' medians; the slow
    factor, the slow share of wall time and the mean dwell (seconds) per state run."""
    ratios = [level / np.percentile(level, 10) for level in levels]
    every = np.concatenate(ratios)
    threshold = 1.25
    for _ in range(20):
        slow, fast = every[every > threshold], every[every <= threshold]
        if not slow.size or not fast.size:
            break
        threshold = math.sqrt(float(np.median(slow)) * float(np.median(fast)))
    factor = float(np.median(every[every > threshold]) / np.median(every[every <= threshold]))
    slow_ms = total_ms = 0.0
    dwells: List[float] = []
    for ratio, wall in zip(ratios, walls):
        state = ratio > threshold
        slow_ms += float(wall[state].sum())
        total_ms += float(wall.sum())
        cuts = np.flatnonzero(np.diff(state.astype(int))) + 1
        dwells += [float(part.sum()) / 1000.0 for part in np.split(wall, cuts)]
    return {"slow_factor": factor, "slow_share": slow_ms / total_ms, "dwell_s": float(np.mean(dwells))}


def evidence_processes(evidence: Path = EVIDENCE) -> Dict[str, List[List[float]]]:
    """The launch-bound records' samples_ms by cell (eager and default; reduce-overhead replays a
    CUDA graph and is not launch-bound): {cell id: [samples of each process]}."""
    found: Dict[str, List[List[float]]] = {}
    paths = sorted((evidence / "run-acc" / "acc" / "latest").glob("*.json")) + \
        sorted((evidence / "second").glob("runner_*.json"))
    for path in paths:
        record = json.loads(path.read_text())
        cell = record.get("cell_id") or path.name.split(".")[0]
        samples = (record.get("timing") or {}).get("samples_ms")
        if samples and "reduce-overhead" not in cell:
            found.setdefault(cell, []).append(samples)
    return found


def fit_measures(processes: Dict[str, List[List[float]]]) -> Dict[str, float]:
    """What ``fit`` measures, from processes by cell: stall rate and cost, the two-state split, and the
    between-process log-SD of process means (pooled over cells with 2 or more processes)."""
    measured = [measure(samples) for runs in processes.values() for samples in runs]
    seconds = sum(m["seconds"] for m in measured)
    episodes = sum(m["episodes"] for m in measured)
    found = {"stall_rate_per_s": episodes / seconds,
             "stall_cost_ms": sum(m["excess_ms"] for m in measured) / max(episodes, 1)}
    found.update(two_state([m["level"] for m in measured], [m["wall"] for m in measured]))
    squares, df = 0.0, 0
    for runs in processes.values():
        if len(runs) >= 2:
            logs = np.log([float(np.mean(samples)) for samples in runs])
            squares += float(np.sum((logs - logs.mean()) ** 2))
            df += len(logs) - 1
    found["between_sd"] = math.sqrt(squares / df) if df else float("nan")
    return found


def simulated_processes(host: Host, shape: Dict[str, Tuple[float, List[int]]], copies: int,
                        rng: np.random.Generator) -> Dict[str, List[List[float]]]:
    """The evidence's shape (per cell: fast-state ms, the calls of each process) drawn ``copies`` times."""
    return {f"{cell}#{copy}": [list(host.process(rng, base, calls)) for calls in counts]
            for cell, (base, counts) in shape.items() for copy in range(copies)}


def shape_of(processes: Dict[str, List[List[float]]]) -> Dict[str, Tuple[float, List[int]]]:
    """Per cell its fast-state ms (the 10th percentile of the stall-free level, pooled) and call counts."""
    return {cell: (float(np.median([np.percentile(measure(s)["level"], 10) for s in runs])), [len(s) for s in runs])
            for cell, runs in processes.items()}


def fit(evidence: Path = EVIDENCE, seed: int = 34) -> Tuple[Host, Dict[str, float]]:
    """Fit Host to the evidence: stall rate, cost, slow factor, share and dwell by ``fit_measures``
    (measured on the simulator too, each is corrected by what the measuring misses: the simulator's
    measured value over its true one), then the residual process-level SD as what is left of the
    between-process spread of the evidence's process means after the host's share (method of
    moments, by simulation of the evidence's shape)."""
    processes = evidence_processes(evidence)
    target = fit_measures(processes)
    shape = shape_of(processes)
    rng = np.random.default_rng(seed)
    host = Host(target["stall_rate_per_s"], target["stall_cost_ms"], target["slow_factor"], target["slow_share"],
                target["dwell_s"], 0.0)
    for _ in range(3):      # measured-on-simulation / true: divide the evidence's measures by it
        seen = fit_measures(simulated_processes(host, shape, 6, rng))
        host = replace(host, **{name: max(1e-6, getattr(host, name) * target[name] / seen[name])
                                for name in ("stall_rate_per_s", "stall_cost_ms", "slow_share", "dwell_s")},
                       slow_factor=max(1.0, 1.0 + (host.slow_factor - 1.0) * (target["slow_factor"] - 1.0)
                                       / max(seen["slow_factor"] - 1.0, 1e-6)))
        host = replace(host, slow_share=min(host.slow_share, 0.95))
    seen = fit_measures(simulated_processes(host, shape, 20, rng))
    residual = math.sqrt(max(0.0, target["between_sd"] ** 2 - seen["between_sd"] ** 2))
    host = replace(host, residual_sd=residual)
    return host, target


def check_fit(host: Host, evidence: Path = EVIDENCE, seed: int = 35) -> Dict[str, Tuple[float, float]]:
    """Each measure on the evidence beside the same measure on the fitted simulator (evidence's shape)."""
    processes = evidence_processes(evidence)
    target = fit_measures(processes)
    seen = fit_measures(simulated_processes(host, shape_of(processes), 20, np.random.default_rng(seed)))
    return {name: (target[name], seen[name]) for name in target}
