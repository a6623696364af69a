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
Shared by tests (``import hostsim``) and benchmarks (tests/ on sys.path). The end of the module holds a second,
simpler model of the same evidence for the runner's timing tests (``fit_loop``, ``simulate_loop``,
``FakeCuda``: formerly tests/host_sim.py).
"""
from __future__ import annotations

import json
import math
import os
import random
import statistics
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


    def turns(self, rng: np.random.Generator, a_ms: float, b_ms: float, blocks: int, block_calls: int,
              levels: Optional[Tuple[float, float]] = None) -> np.ndarray:
        """Two processes alive at once timing blocks in turns (runner.baton; benchmarks/bench_cross_process.py):
        A's block, then B's, ``blocks`` times, on one host timeline (its states and stalls fall on whichever
        block runs then), each process at its own level (exp(N(0, residual_sd)) unless ``levels`` gives them).
        The (blocks, 2) array of A's and B's block means."""
        if levels is None:
            levels = tuple(np.exp(rng.normal(0.0, self.residual_sd, 2)))
        work = np.concatenate([np.full(block_calls, ms * level) for _ in range(blocks)
                               for ms, level in ((a_ms, levels[0]), (b_ms, levels[1]))])
        return self.calls(rng, work, level=1.0).reshape(blocks, 2, block_calls).mean(axis=2)


def turn_rounds(rng: np.random.Generator, trials: int, rounds: int, host: Host, base_ms: float = 4.0,
                change: float = 0.0, blocks: int = 10, block_calls: int = 30) -> np.ndarray:
    """Image changes of known truth (B = A x (1 + change)) measured in turns, one pair of processes a round: the
    (trials, rounds) array of each round's log ratio log(B / A), the median over its block pairs (a stall in one
    block moves one pair), as the paired speed-ups reduce a process."""
    out = np.empty((trials, rounds))
    for trial in range(trials):
        for index in range(rounds):
            means = host.turns(rng, base_ms, base_ms * (1.0 + change), blocks, block_calls)
            out[trial, index] = float(np.median(np.log(means[:, 1] / means[:, 0])))
    return out


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


# --- a run's rounds: shared machine states, drift and a step (issue 34, item 4) -------------------------

def abba_slots(rounds: int) -> Tuple[np.ndarray, np.ndarray]:
    """When each round's baseline (A) and candidate (B) process ran, as a share of the run (0 first, 1 last):
    the executors' counterbalanced order, A then B in even rounds, B then A in odd ones."""
    slots = 2 * rounds - 1
    a = np.array([2 * r + (r % 2) for r in range(rounds)]) / slots
    b = np.array([2 * r + 1 - (r % 2) for r in range(rounds)]) / slots
    return a, b


def machine_factors(rng: np.random.Generator, trials: int, rounds: int, state_sd: float = 0.0, drift: float = 0.0,
                    step: float = 0.0) -> Tuple[np.ndarray, np.ndarray]:
    """Per trial and round, the factor the machine put on the A and on the B process: a state the round shares
    (lognormal, log-SD ``state_sd``), a linear drift (the run's last process ``drift`` x slower than its first)
    and a step mid-run (every process after the run's midpoint ``step`` x slower)."""
    when_a, when_b = abba_slots(rounds)
    state = rng.normal(0.0, state_sd, (trials, rounds)) if state_sd else np.zeros((trials, rounds))

    def factor(when: np.ndarray) -> np.ndarray:
        return np.exp(state) * (1.0 + drift * when) * np.where(when > 0.5, 1.0 + step, 1.0)
    return factor(when_a), factor(when_b)


def run_rounds(rng: np.random.Generator, trials: int, rounds: int, *, host: Optional[Host] = None, cv: float = 0.01,
               base_ms: float = 4.0, calls: int = 300, change: float = 0.0, state_sd: float = 0.0,
               drift: float = 0.0, step: float = 0.0) -> Tuple[np.ndarray, np.ndarray]:
    """Image changes of known truth (candidate = baseline x (1 + change)) measured in ``rounds`` rounds of one
    run: (baseline, candidate) process means, arrays (trials, rounds), round r of both sides in column r.
    Each process is ``host``'s mean of ``calls`` calls of ``base_ms`` (the fitted host), or without a host a
    lognormal process level of log-SD ``cv``; the machine's factors (machine_factors) on top."""
    def side(ms: float) -> np.ndarray:
        if host is None:
            return ms * np.exp(rng.normal(0.0, cv, (trials, rounds)))
        return np.array([[host.process(rng, ms, calls).mean() for _ in range(rounds)] for _ in range(trials)])
    baseline, candidate = side(base_ms), side(base_ms * (1.0 + change))
    on_a, on_b = machine_factors(rng, trials, rounds, state_sd, drift, step)
    return baseline * on_a, candidate * on_b

# --- the noise check's warning (issue 32 item 3): what a probe's figure says of launch-bound verdicts ------------
#
# A family of hosts from quiet to the fitted H100 and past it (``scaled``): the stall rate, the slow state's extra
# time and the process level's log-SD scaled together, the stalls' size, the slow share and the dwell kept. On each,
# the noise probe's launch-bound loop (``probe_calls``; ``block_cv``, runner.noise_probe.summarize's block CV of one
# process, turned by ``figures`` into the change 3 processes a side resolve, host_noise.resolvable_pct, as a run
# states it)
# beside what a true change does to launch-bound verdicts at 3 processes a side (``verdict_shares``: a 4 ms eager
# cell at batch 1, 300 calls a process, stats.judge_many). ``undecided_crossing`` is the probe figure at which the
# verdicts of a true 10% change come out mostly (half) undecided: the calibrated host_noise.UNDECIDED_PCT.

PROBE_CALL_MS = 0.3       # the probe's chain a call on a GPU, about (48 small kernels, launch-bound)
PROBE_LAUNCH_S = 5.6      # its launch-bound loop: runner.noise_probe SECONDS x LAUNCH_SHARE on a GPU


def scaled(host: Host, scale: float) -> Host:
    """``host`` with its noise times ``scale`` (0: a quiet host, 1: itself): the stall rate, the slow state's extra
    time and the process level's log-SD; the stalls' size, the slow share and the dwell kept."""
    return replace(host, stall_rate_per_s=host.stall_rate_per_s * scale,
                   slow_factor=1.0 + (host.slow_factor - 1.0) * scale, residual_sd=host.residual_sd * scale)


def probe_calls(host: Host, rng: np.random.Generator, call_ms: float = PROBE_CALL_MS,
                seconds: float = PROBE_LAUNCH_S) -> np.ndarray:
    """The noise probe's launch-bound loop on ``host``: its calls (ms) for ``seconds``."""
    return host.process(rng, call_ms, int(seconds * 1000.0 / call_ms))


def block_cv(samples: np.ndarray, blocks: int = 10) -> float:
    """runner.noise_probe.summarize's ``block_cv`` (the CV of the means of ``blocks`` consecutive blocks, the same
    split), in numpy: a sweep draws thousands of probes (tests hold the two equal)."""
    edges = np.round(np.arange(blocks + 1) * (samples.size / blocks)).astype(int)
    means = np.array([samples[edges[i]:edges[i + 1]].mean() for i in range(blocks)])
    return float(means.std(ddof=1) / means.mean())


def figures(cvs: Sequence[float], processes: int = 3) -> np.ndarray:
    """matrixbench.host_noise.resolvable_pct of many blocks' CVs at once: it is exp(cv x u) - 1 (in %) for a u
    that depends on ``processes`` alone (report.stats.detectable_at: the t quantiles times the log ratio's
    standard error, cv x sqrt(2 / processes)), so one call gives u (tests hold the two equal)."""
    from matrixbench.host_noise import resolvable_pct

    unit = math.log1p(resolvable_pct(1.0, processes) / 100.0)
    return np.expm1(np.asarray(cvs, dtype=float) * unit) * 100.0


def verdict_shares(host: Host, rng: np.random.Generator, change: float = 0.10, processes: int = 3,
                   trials: int = 300, base_ms: float = 4.0, calls: int = 300) -> Dict[str, float]:
    """The share of each verdict (stats.judge_many at the report's margin) when a launch-bound cell of
    ``base_ms`` is compared with one ``change`` slower, ``processes`` processes a side of ``calls`` calls each."""
    from matrixbench.report import stats, verdicts

    def side(ms: float) -> np.ndarray:
        return np.array([[host.process(rng, ms, calls).mean() for _ in range(processes)] for _ in range(trials)])
    judged = stats.judge_many(side(base_ms), side(base_ms * (1.0 + change)), margin_pct=verdicts.MARGIN_PCT)
    names, counts = np.unique(judged.verdict, return_counts=True)
    return {str(name): float(count) / trials for name, count in zip(names, counts)}


def threshold_sweep(host: Host, scales: Sequence[float], seed: int = 32, probes: int = 9, trials: int = 300,
                    change: float = 0.10, probe_call_ms: float = PROBE_CALL_MS) -> List[Dict[str, float]]:
    """Per scale of ``host``'s noise: the median probe figure (of ``probes`` probes), the share of probes that warn
    (above host_noise.UNDECIDED_PCT) and the share of undecided verdicts of a true ``change`` at 3 processes a
    side (``trials`` comparisons)."""
    from matrixbench.host_noise import UNDECIDED_PCT

    rows = []
    for scale in scales:
        rng = np.random.default_rng([seed, int(round(scale * 1000))])
        noisy = scaled(host, scale)
        found = figures([block_cv(probe_calls(noisy, rng, probe_call_ms)) for _ in range(probes)])
        shares = verdict_shares(noisy, rng, change=change, trials=trials)
        rows.append({"scale": float(scale), "probe_pct": float(np.median(found)),
                     "probe_pct_low": float(np.min(found)), "probe_pct_high": float(np.max(found)),
                     "warned": float(np.mean(found > UNDECIDED_PCT)),
                     "undecided": shares.get("undecided", 0.0),
                     "starred": shares.get("slower", 0.0) + shares.get("faster", 0.0)})
    return rows


def undecided_crossing(rows: Sequence[Dict[str, float]], level: float = 0.5) -> float:
    """The probe figure (%) at which the undecided share first reaches ``level``: linear in log(figure) between
    the two rows around it (rows in increasing noise)."""
    for before, after in zip(rows, rows[1:]):
        if before["undecided"] < level <= after["undecided"]:
            share = (level - before["undecided"]) / (after["undecided"] - before["undecided"])
            low, high = math.log(before["probe_pct"]), math.log(after["probe_pct"])
            return math.exp(low + share * (high - low))
    raise ValueError(f"the undecided share never crosses {level:.0%} over these scales")


# --- the runner's view: a block-wise launch-bound loop and a fake torch.cuda (formerly tests/host_sim.py) ----
#
# A second, simpler model of the same evidence, for runner.timing and runner.host (tests/test_runner_host.py):
# ``fit_loop(processes)`` reads per-process ``samples_ms`` (the records of one cell, the copy in
# tests/data/gpu-evidence/h100-2026-11-26): each process's median level, the spread of those levels between
# processes (log), the wander of block medians within a process (log), the stall rate (calls beyond 3x the
# median per call) and the stalls' size (stall / median). ``simulate_loop`` draws a process from them: a level, a
# block-wise wander, log-normal per-call noise, stalls at the fitted rate; the launch time of each call is the
# call itself for a launch-bound cell (the host's time is the call's: the H100 timelines' CPU-side launch mean was
# within 0.5% of the event mean) and a small share of the GPU time where a CUDA graph takes the host out of the
# loop. ``FakeCuda`` is a fake ``torch.cuda`` for ``runner.timing``: a host clock and a GPU clock; a step spends
# its launch time on the host and its GPU time on the GPU, which cannot finish before the last launch.

REPO_EVIDENCE = Path(__file__).resolve().parent / "data" / "gpu-evidence" / "h100-2026-11-26"
RECORDS = REPO_EVIDENCE / "run-acc" / "acc" / "latest"


def load(name: str) -> dict:
    for folder in (RECORDS, REPO_EVIDENCE / "second"):
        if (folder / name).exists():
            return json.loads((folder / name).read_text())
    raise FileNotFoundError(name)


def timelines() -> List[dict]:
    return [json.loads(line) for line in (REPO_EVIDENCE / "second" / "independent_stall_timelines.jsonl").open()]


@dataclass
class LoopFit:
    level_ms: float           # the median of the processes' medians
    between_sigma: float      # log spread of the process medians
    wander_sigma: float       # log spread of block medians within a process
    noise_sigma: float        # per-call log noise, stalls left out
    stall_rate: float         # stalls per call
    stall_size: List[float]   # stall / median, as seen


def fit_loop(processes: Sequence[Sequence[float]], block: int = 50, k: float = 3.0) -> LoopFit:
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
    return LoopFit(statistics.median(medians), between, statistics.median(wander) if wander else 0.0,
               statistics.median(noise), stalls / calls, sizes or [8.0])


def simulate_loop(fitted: LoopFit, n: int, rng: random.Random, launch_bound: bool = True,
                  stall_rate: Optional[float] = None, level_ms: Optional[float] = None,
                  graph_launch_share: float = 0.08, block: int = 50):
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
