"""An independent check of docs/verdicts.md's error rates: own simulator, fresh seeds, the report's judging functions.

Nothing here comes from tests/hostsim.py, tests/autosim.py or the tests' simulators. The truth is planted by this
file's own model and every verdict is made by the project's public judging functions, called as the report calls
them: ``verdicts.judge_cells`` / ``verdicts.judge_speedup`` on combined cell rows (image, mode, process means,
process rounds, process turns), ``stats.judge_paired`` / ``stats.judge_paired_change`` on paired blocks,
``stats.benjamini_hochberg`` on p-values, ``stats.judge_sides`` with ``adaptive.goes_on`` / ``adaptive.promising``
for ``repeats: auto``'s waves (this file's own wave loop), and ``stats.judge_many`` (what ``judge`` runs, one row)
for the large sweep of small unequal sides.

The model (``Machine``): a process's calls are lognormal around base x truth x exp(process level + machine effect),
the process level a normal draw of log-SD ``between`` of its own, per-call noise of log-SD ``per_call``, optional
stalls (a call ``stall_size`` x slower with probability ``stall_rate``), and a machine effect the whole machine
shares at a process's place in the run's order: a state per round (log-SD ``state``), a linear drift over the run,
a step at its midpoint. A process's estimate is the mean of its calls (stats.JUDGED_ESTIMATE); the truth is the
planted ratio (stalls and noise scale with the latency, so the ratio of the sides' geometric means is exact).

Every rate is a share of simulated comparisons with its binomial standard error; each row carries the claim of
docs/verdicts.md it checks. ``--quick`` runs a tenth of the trials.
"""
import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import describe, lscpu  # noqa: E402

from matrixbench.executors import adaptive  # noqa: E402
from matrixbench.report import stats, verdicts  # noqa: E402

MARGIN = 3.0
RUN = "independent-run"


@dataclass(frozen=True)
class Machine:
    between: float = 0.05        # log-SD of a process's own level
    per_call: float = 0.03       # log-SD of one call about its process's level
    calls: int = 40              # calls a process (its estimate: their mean)
    stall_rate: float = 0.0      # share of calls that stall
    stall_size: float = 3.0      # a stalled call's factor
    state: float = 0.0           # log-SD of a state each round shares
    drift: float = 0.0           # linear drift over the run (log)
    step: float = 0.0            # a step at the run's midpoint (log)


def process_estimates(rng, machine: Machine, levels):
    """The mean of each process's calls, for an array of log levels (any shape)."""
    levels = np.asarray(levels, dtype=float)
    calls = np.exp(levels[..., None] + machine.per_call * rng.standard_normal(levels.shape + (machine.calls,)))
    if machine.stall_rate:
        calls = np.where(rng.random(calls.shape) < machine.stall_rate, calls * machine.stall_size, calls)
    # centre so a side's estimate is unbiased for exp(level) on the log scale up to a constant both sides share
    return calls.mean(axis=-1)


def run_rounds(rng, machine: Machine, rounds, log_truth, *, order="counterbalanced"):
    """One comparison's two sides run round by round, A then B in even rounds and B then A in odd ones (the
    executors' order), each process's level its own draw plus the machine's effect at its place. Returns
    (baseline estimates, candidate estimates), each one per round."""
    places = 2 * rounds
    state = machine.state * rng.standard_normal(rounds)
    levels = [np.empty(rounds), np.empty(rounds)]
    for r in range(rounds):
        first = 0 if (order != "counterbalanced" or r % 2 == 0) else 1
        for side in (0, 1):
            place = 2 * r + (0 if side == first else 1)
            t = place / max(1, places - 1)
            effect = state[r] + machine.drift * t + (machine.step if t >= 0.5 else 0.0)
            levels[side][r] = effect + machine.between * rng.standard_normal() + (log_truth if side else 0.0)
    return process_estimates(rng, machine, levels[0]) * 4.0, process_estimates(rng, machine, levels[1]) * 4.0


def row(image, mode, means, rounds=None, run=RUN, turns=None):
    found = {"image": image, "cell.mode": mode, "process_means": [float(v) for v in means], "margin_pct": MARGIN,
             "source": f"sim {image}/{mode}", "process_samples": []}
    if rounds is not None:
        found["process_rounds"] = [(run, int(r)) for r in rounds]
    if turns is not None:
        found["process_turns"] = list(turns)
    return found


def share(hits, trials):
    p = hits / trials
    return {"rate": p, "se": math.sqrt(max(p * (1 - p), 1e-12) / trials), "trials": trials}


def summarise(judgements, log_truth, trials):
    """Starred (at no change: false stars), starred the right way, 95% coverage, 'no change' share."""
    stars = sum(j.verdict in stats.STARRED for j in judgements)
    truth = math.exp(log_truth)
    covered = sum(j.low is not None and j.low <= truth <= j.high for j in judgements)
    right = sum((j.verdict == stats.SLOWER) if log_truth > 0 else (j.verdict == stats.FASTER) if log_truth < 0
                else False for j in judgements)
    nochange = sum(j.verdict == stats.NO_CHANGE for j in judgements)
    return {"starred": share(stars, trials), "right_way": share(right, trials),
            "coverage": share(covered, trials), "no_change": share(nochange, trials)}


# --- designs -------------------------------------------------------------------------------------------------

def image_change(rng, trials, machine, rounds, log_truth, *, paired=True, kind="image", drop=None):
    """Image (or mode) changes through verdicts.judge_cells: one run, rounds keys (paired by round) or two runs
    (unpaired). ``drop``: (side, round) of a process that failed (left out of that side)."""
    out = []
    for _ in range(trials):
        base, cand = run_rounds(rng, machine, rounds, log_truth)
        keep = [list(range(rounds)), list(range(rounds))]
        if drop is not None:
            keep[drop[0]].remove(drop[1])
        means = [base[keep[0]], cand[keep[1]]]
        if kind == "image":
            names = (("a", "eager"), ("b", "eager"))
        else:
            names = (("a", "default"), ("a", "reduce-overhead"))
        if paired:
            rows = [row(*names[s], means[s], keep[s]) for s in (0, 1)]
        else:
            rows = [row(*names[s], means[s], keep[s], run=f"run{s}") for s in (0, 1)]
        out.append(verdicts.judge_cells(*rows))
    return out


def speedup(rng, trials, machine, processes, log_speedup, compiled_between=None):
    """Compiled against eager of one image (unpaired, Welch) through verdicts.judge_speedup; the truth the
    speed-up eager / compiled (candidate / baseline = 1 / speed-up)."""
    other = Machine(**{**machine.__dict__, "between": compiled_between or machine.between})
    out = []
    for _ in range(trials):
        eager = process_estimates(rng, machine, machine.between * rng.standard_normal(processes[0])) * 10.0
        compiled = process_estimates(rng, other, other.between * rng.standard_normal(processes[1])
                                     - log_speedup) * 10.0
        rounds = [list(range(processes[0])), list(range(processes[1]))]
        found = verdicts.judge_speedup(row("a", "eager", eager, rounds[0]), row("a", "default", compiled, rounds[1]))
        # speed-up's verdict "faster" = compiled faster; express as candidate/baseline for summarise
        out.append(found)
    return out


def summarise_speedup(judgements, log_speedup, trials):
    truth = math.exp(log_speedup)
    stars = sum(j.verdict in stats.STARRED for j in judgements)
    covered = sum(j.low is not None and j.low <= truth <= j.high for j in judgements)
    right = sum(j.verdict == stats.FASTER for j in judgements) if log_speedup > 0 else 0
    return {"starred": share(stars, trials), "right_way": share(right, trials), "coverage": share(covered, trials)}


def paired_blocks(rng, processes, log_speedup, *, level=0.25, block_state=0.10, block_noise=0.02, blocks=12,
                  stall_rate=0.02):
    """One cell's paired blocks: per process a level both halves share, a host state per block both halves of a
    pair share, block noise and an occasional stalled block (2-4x) in either half."""
    out = []
    for _ in range(processes):
        p = level * rng.standard_normal()
        pairs = []
        for _ in range(blocks):
            s = block_state * rng.standard_normal()
            e = math.exp(p + s + block_noise * rng.standard_normal()) * 8.0
            c = math.exp(p + s + block_noise * rng.standard_normal() - log_speedup) * 8.0
            if rng.random() < stall_rate:
                e *= rng.uniform(2, 4)
            if rng.random() < stall_rate:
                c *= rng.uniform(2, 4)
            pairs.append((e, c))
        out.append(pairs)
    return out


def turns_change(rng, trials, rounds, log_truth, *, level, blocks=10, host_state=0.25, block_noise=0.03,
                 stall_rate=0.02):
    """Image changes in turns through verdicts.judge_cells: each round's two processes (a level each) time blocks
    in turns, the host's state per block shared by the pair's blocks of that index."""
    out = []
    for _ in range(trials):
        means, turns = [[], []], [[], []]
        for r in range(rounds):
            state = host_state * rng.standard_normal(blocks)
            for side in (0, 1):
                lv = level * rng.standard_normal() + (log_truth if side else 0.0)
                ms = 4.0 * np.exp(lv + state + block_noise * rng.standard_normal(blocks))
                ms = np.where(rng.random(blocks) < stall_rate, ms * rng.uniform(1.5, 3.0, blocks), ms)
                image, partner = ("a", "b") if side == 0 else ("b", "a")
                turns[side].append(stats.Turns(image, f"pair{r}", partner, tuple(float(v) for v in ms),
                                               "first" if side == r % 2 else "second"))
                means[side].append(float(ms.mean()))
        rows = [row(("a", "b")[s], "eager", means[s], range(rounds), turns=turns[s]) for s in (0, 1)]
        out.append(verdicts.judge_cells(*rows))
    return out


def pooled_sd(groups):
    """The pooled standard deviation of ``groups`` (each about its own mean), None without 2 values in one."""
    squares, df = 0.0, 0
    for values in groups:
        if len(values) >= 2:
            squares += float(np.sum((np.asarray(values) - np.mean(values)) ** 2))
            df += len(values) - 1
    return math.sqrt(squares / df) if df else None


def auto_run(rng, models, machine, log_truth, policy, *, cvs=None):
    """``repeats: auto`` for ``models`` image changes of one run (one eager cell a model in two images): this
    file's own wave loop, the project's stopping rule. After the first ``policy.minimum`` rounds, each wave
    judges every comparison as the report does (stats.judge_sides on its rounds), and one that
    ``adaptive.goes_on`` and is ``adaptive.promising`` (the spread of round log-ratios pooled over the run's paired
    comparisons, or of process means for unpaired ones) gets one more round, up to ``policy.maximum``. The
    machine's state per round is shared by every model of the round; drift runs over the rounds. Returns the final
    judgements (verdicts.judge_cells), the mean processes a cell and each comparison's reason to stop
    ("interim": goes_on stopped it on a star or "no change"; "futile"; "max")."""
    maxr = policy.maximum
    state = machine.state * rng.standard_normal(maxr)
    between = cvs if cvs is not None else np.full(models, machine.between)
    levels = [between[:, None] * rng.standard_normal((models, maxr)) + state[None, :],
              between[:, None] * rng.standard_normal((models, maxr)) + state[None, :] + log_truth]
    t = np.arange(maxr) / max(1, maxr - 1)
    levels = [lv + machine.drift * t[None, :] + machine.step * (t[None, :] >= 0.5) for lv in levels]
    sides = [process_estimates(rng, machine, lv) * 4.0 for lv in levels]
    count = np.full(models, policy.minimum)
    why = [""] * models
    active = np.ones(models, dtype=bool)
    while active.any():
        judged = [stats.judge_sides(list(sides[0][m, :count[m]]), list(sides[1][m, :count[m]]),
                                    margin_pct=policy.margin_pct, rounds=([(None, r) for r in range(count[m])],) * 2)
                  for m in range(models)]
        rspread = pooled_sd([np.log(sides[1][m, :count[m]]) - np.log(sides[0][m, :count[m]]) for m in range(models)
                             if judged[m].pairing == stats.PAIRED_BY_ROUND])
        pspread = pooled_sd([np.log(sides[s][m, :count[m]]) for m in range(models) for s in (0, 1)])
        for m in np.flatnonzero(active):
            j = judged[m]
            spread = (adaptive.Spread(rspread, paired=True) if j.pairing == stats.PAIRED_BY_ROUND and rspread
                      else adaptive.Spread(pspread) if pspread else None)
            if count[m] >= maxr:
                why[m] = "max"
            elif not adaptive.goes_on(j, policy, int(count[m])):
                why[m] = "interim"
            elif not adaptive.promising(j, policy, spread):
                why[m] = "futile"
            else:
                count[m] += 1
                continue
            active[m] = False
    final = [verdicts.judge_cells(row("a", "eager", sides[0][m, :count[m]], range(count[m])),
                                  row("b", "eager", sides[1][m, :count[m]], range(count[m]))) for m in range(models)]
    return final, float(count.mean()), why


# --- the sweep: one function a section, each adding rows -----------------------------------------------------

TEN = math.log(1.10)
MACHINES = {"none": {}, "round state 5%": {"state": 0.05}, "drift 5%": {"drift": 0.05},
            "step 5%": {"step": 0.05}, "all three": {"state": 0.05, "drift": 0.05, "step": 0.05}}


def section_unpaired(rng, trials, add):
    """Image changes across two runs (Welch), the tests' kind of model: CV 1-10%, per-call 1-3%, rare stalls."""
    claims = {2: "2.4%", 3: "3.2%", 5: "4.3%", 10: "4.9%"}
    for n in (2, 3, 5, 10):
        for lt, name in ((0.0, "no change"), (TEN, "+10%")):
            js = []
            for _ in range(trials):
                mac = Machine(between=float(rng.uniform(0.01, 0.10)), per_call=float(rng.uniform(0.01, 0.03)),
                              stall_rate=0.003)
                js += image_change(rng, 1, mac, n, lt, paired=False)
            add("unpaired", f"image change, two runs (Welch), {n} v {n}, CV 1-10%", name, summarise(js, lt, trials),
                f"starred {claims[n]} at no change; coverage 94.8-97.4%" if lt == 0 else "coverage >= 94.8%")


def section_paired(rng, trials, add):
    """Image and mode changes paired by round under the five machines."""
    power_claim = {("none", 3): "25.7% / 33.0%", ("none", 5): "62.4% / 72.8%", ("none", 10): "97.0% / 97.9%",
                   ("round state 5%", 3): "26.9% / 17.0%", ("round state 5%", 5): "63.0% / 45.2%",
                   ("round state 5%", 10): "96.7% / 88.0%"}
    level_claim = {3: "0.0-5.0% (CV 1%) / 3.8-5.3% (CV 5%); coverage >= 95.0 / 94.7%",
                   5: "1.2-4.6% / 4.7-5.4%; coverage >= 95.4 / 94.6%",
                   10: "4.5-5.2% / 4.8-5.7%; coverage >= 94.8 / 94.3%"}
    for n in (3, 5, 10):
        for cv in (0.01, 0.05):
            for mname, kw in MACHINES.items():
                if cv == 0.01 and mname not in ("none", "all three"):
                    continue
                mac = Machine(between=cv, **kw)
                js = image_change(rng, trials, mac, n, 0.0)
                add("paired", f"image change paired by round, {n} rounds, CV {cv:.0%}, {mname}", "no change",
                    summarise(js, 0.0, trials), level_claim[n], pairings=sorted({j.pairing for j in js}))
                if cv == 0.05 and (mname, n) in power_claim:
                    found = summarise(image_change(rng, trials, mac, n, TEN), TEN, trials)
                    found["unpaired_right_way"] = summarise(image_change(rng, trials, mac, n, TEN, paired=False), TEN,
                                                            trials)["right_way"]
                    add("paired", f"image change paired by round, {n} rounds, CV 5%, {mname}", "+10%", found,
                        f"starred slower {power_claim[(mname, n)]} (paired / unpaired)")
    for mname in ("none", "all three"):
        js = image_change(rng, trials, Machine(between=0.05, **MACHINES[mname]), 3, 0.0, kind="mode")
        add("paired", f"mode change paired by round, fixed 3, CV 5%, {mname}", "no change", summarise(js, 0.0, trials),
            "fixed 3, CV 5%: 5.0-6.6% at 800 (5.37% ± 0.41% at 3,000); coverage >= 93.4%",
            pairings=sorted({j.pairing for j in js}))
    js = image_change(rng, trials, Machine(between=0.05, state=0.05), 3, 0.0, drop=(1, 1))
    add("paired", "image change, one process failed (3 v 2, 2 shared rounds), round state 5%, CV 5%", "no change",
        summarise(js, 0.0, trials), "<= 5% (the t-test's own level)", pairings=sorted({j.pairing for j in js}))
    js = image_change(rng, trials, Machine(between=0.05, stall_rate=0.02, stall_size=8.0), 3, 0.0)
    add("paired", "image change paired by round, 3 rounds, CV 5%, 2% of calls stall 8x", "no change",
        summarise(js, 0.0, trials), "<= 5% (fitted host: 5.13% ± 0.06% pooled)")


def section_speedup(rng, trials, add):
    """Speed-ups (Welch), paired speed-ups and a paired speed-up's change between images."""
    for n in (2, 3, 5):
        for ls, name in ((0.0, "no speed-up"), (math.log(1.3), "1.3x")):
            js = speedup(rng, trials, Machine(between=0.05), (n, n), ls, compiled_between=0.10)
            add("speedup", f"speed-up (Welch), {n} v {n}, eager CV 5%, compiled CV 10%", name,
                summarise_speedup(js, ls, trials), "<= 5% at no change; coverage 94.8-97.4%")
    for ls, name in ((0.0, "no speed-up"), (math.log(1.1), "10% speed-up")):
        js = [stats.judge_paired(paired_blocks(rng, 3, ls), margin_pct=MARGIN) for _ in range(trials)]
        add("speedup", "paired speed-up, 3 processes, 12 block pairs, level 0.25, block state 0.10", name,
            summarise_speedup(js, ls, trials), "4.4% starred at no change; 97.8% faster at 10% (fitted host)")
    for lc, name in ((0.0, "no change"), (math.log(1.1), "+10%")):
        js = [stats.judge_paired_change(paired_blocks(rng, 3, 0.0), paired_blocks(rng, 3, lc), margin_pct=MARGIN)
              for _ in range(trials)]
        add("speedup", "paired speed-up's change between images, 3 v 3", name, summarise(js, lc, trials),
            "2.8% starred at no change; 97.0% decided at 10% (fitted host)")


def section_aa(rng, trials, add):
    """A/A paired by round: this simulator's rate beside the one the report prints (simulated_false_star_rate)."""
    for n in (2, 3, 5, 10):
        js = []
        for _ in range(trials):
            js += image_change(rng, 1, Machine(between=float(rng.uniform(0.01, 0.10)), state=0.03), n, 0.0)
        found = summarise(js, 0.0, trials)
        found["report_simulated_rate"] = stats.simulated_false_star_rate(n, n, paired=True)
        add("aa", f"A/A paired by round, {n} v {n}, CV 1-10%, round state 3%", "no change", found,
            f"1.2-5% for fixed 2-10; the report prints {found['report_simulated_rate']:.2%}")


def section_turns(rng, trials, add):
    for level, lt, name, claim in ((0.25, 0.0, "no change", "5.2% (level 0.25, hostsim)"),
                                   (0.01, 0.0, "no change", "4.2% (level 0.01, hostsim)"),
                                   (0.01, TEN, "+10%", "92.0% slower (level 0.01, hostsim)"),
                                   (0.25, TEN, "+10%", "turns do not help at level 0.25")):
        js = turns_change(rng, trials, 3, lt, level=level)
        add("turns", f"image change in turns, 3 rounds, 10 blocks, per-process level {level}", name,
            summarise(js, lt, trials), claim, pairings=sorted({j.pairing for j in js}))


AUTO_CONDITIONS = (("none", "CV 1-10%"), ("round state 5%", "CV 1%"), ("round state 5%", "CV 5%"),
                   ("all three", "CV 5%"))


def section_auto(rng, trials, add, conditions=AUTO_CONDITIONS, changes=((0.0, "no change"), (TEN, "+10%"))):
    """repeats auto 3-10 (the spending rule), image changes paired by round as the report judges them."""
    policy, models = adaptive.Policy(3, 10, MARGIN), 20
    runs = max(5, trials // models)
    for mname, cvname in conditions:
        for lt, name in changes:
            js, counts, whys = [], [], []
            for _ in range(runs):
                cvs = (rng.uniform(0.01, 0.10, models) if cvname == "CV 1-10%"
                       else np.full(models, 0.01 if cvname == "CV 1%" else 0.05))
                found, mean, why = auto_run(rng, models, Machine(**MACHINES[mname]), lt, policy, cvs=cvs)
                js += found
                counts.append(mean)
                whys += why
            stops = {reason: share(sum(w == reason and j.starred for w, j in zip(whys, js)), len(js))["rate"]
                     for reason in ("interim", "futile", "max")}
            add("auto", f"repeats auto 3-10 (spending), {models} image changes a run, {cvname}, {mname}", name,
                summarise(js, lt, len(js)),
                "<= 5% (paired: 0.0-4.6% at CV 1%, 3.4-5.2% at CV 5%); coverage >= 94.7%" if lt == 0
                else "CV 5%, no machine effect: 84.9% slower", processes_a_cell=float(np.mean(counts)),
                starred_by_stop=stops)


SIDES = ((2, 3), (2, 5), (2, 10), (3, 4), (3, 10), (4, 10), (4, 5), (5, 10), (5, 20), (6, 10), (2, 2), (3, 3),
         (4, 4), (5, 5), (10, 10))
CLAIMED_SIDES = ((2, 5), (2, 10), (3, 4), (3, 10), (4, 10))


def section_sides(rng, trials, add):
    """Welch with Hsu's df on small or unequal sides (judge_many: what judge runs, one row), before (Welch's df,
    WELCH_DF_LESS = 0) and now, on the same draws."""
    big = max(trials * 10, 2000)
    now = stats.WELCH_DF_LESS
    for sizes in SIDES:
        for spreads in ((1.0, 1.0), (1.0, 0.3), (1.0, 0.15), (1.0, 0.07), (0.3, 1.0)):
            if sizes[0] == sizes[1] and spreads == (0.3, 1.0):
                continue
            sides = [np.exp(0.05 * sd * rng.standard_normal((big, n))) for n, sd in zip(sizes, spreads)]
            rates = {}
            for label, less in (("before", 0.0), ("now", now)):
                stats.WELCH_DF_LESS = less
                try:
                    found = stats.judge_many(*sides, margin_pct=MARGIN)
                finally:
                    stats.WELCH_DF_LESS = now
                rates[label] = (int(np.sum(np.isin(found.verdict, stats.STARRED))),
                                int(np.sum((found.low <= 1.0) & (1.0 <= found.high))))
            claimed = sizes in CLAIMED_SIDES and spreads in ((1.0, 1.0), (1.0, 0.3))
            add("sides", f"Welch {sizes[0]} v {sizes[1]}, log-SDs 5% x {spreads[0]:g} : {spreads[1]:g}", "no change",
                {"starred": share(rates["now"][0], big), "coverage": share(rates["now"][1], big),
                 "before": share(rates["before"][0], big)},
                "<= 5% with Hsu's df" if claimed else "not claimed; allowed by the product: <= 5% expected")


def section_bh(rng, trials, add):
    """Benjamini-Hochberg's false-discovery rate over reports, and detectable_at's 80% power."""
    for nulls, changed, size in ((90, 10, 1.06), (50, 50, 1.04), (100, 0, 1.0)):
        shares, reports = [], max(200, trials // 5)
        for _ in range(reports):
            truth = np.r_[np.ones(nulls), np.full(changed, size)]
            n = nulls + changed
            found = stats.judge_many(np.exp(0.03 * rng.standard_normal((n, 5))),
                                     truth[:, None] * np.exp(0.03 * rng.standard_normal((n, 5))), margin_pct=MARGIN)
            kept = np.asarray(stats.benjamini_hochberg(list(map(float, found.p_value))))
            shares.append(int(kept[:nulls].sum()) / max(int(kept.sum()), 1))
        add("bh", f"Benjamini-Hochberg over {nulls} unchanged + {changed} at {size:g}, 5 v 5, CV 3%", "mixed",
            {"starred": {"rate": float(np.mean(shares)), "se": float(np.std(shares, ddof=1) / math.sqrt(reports)),
                         "trials": reports}}, "false-discovery rate <= 5% (90 + 10 at 1.06)")
    for n, cv in ((3, 0.04), (5, 0.04), (10, 0.04), (3, 0.10)):
        change = stats.detectable_at(cv, n) / 100.0
        big = max(trials * 3, 2000)
        found = stats.judge_many(np.exp(cv * rng.standard_normal((big, n))),
                                 (1 + change) * np.exp(cv * rng.standard_normal((big, n))), margin_pct=MARGIN)
        add("detectable", f"detectable_at({cv:g}, {n}) = {change:.2%} planted", f"+{change:.2%}",
            {"starred": share(int(np.sum(found.verdict == stats.SLOWER)), big)},
            "starred 80% (the test: 72-88% at the median detectable_pct of 5 a side)")


def section_confirm(rng, trials, add):
    """Reruns, at about 7x the trials, the rows of the main sweep that came out 2 or more standard errors above 5%:
    paired by round at 3 rounds and CV 5% (no machine effect, a round state), and auto under CV 1-10%."""
    for mname in ("none", "round state 5%"):
        js = image_change(rng, trials * 7, Machine(between=0.05, **MACHINES[mname]), 3, 0.0)
        add("confirm", f"image change paired by round, 3 rounds, CV 5%, {mname}", "no change",
            summarise(js, 0.0, trials * 7), "3.8-5.3% (CV 5%); coverage >= 94.7%")
    section_auto(rng, trials * 7, add, conditions=(("none", "CV 1-10%"),), changes=((0.0, "no change"),))


SECTIONS = {"unpaired": section_unpaired, "paired": section_paired, "speedup": section_speedup, "aa": section_aa,
            "turns": section_turns, "auto": section_auto, "sides": section_sides, "bh": section_bh,
            "confirm": section_confirm}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=20261128)
    parser.add_argument("--quick", action="store_true", help="a tenth of the trials")
    parser.add_argument("--only", default="", help="comma-separated sections: " + ", ".join(SECTIONS))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "independent_verdicts")
    args = parser.parse_args(argv)
    trials = max(100, args.trials // 10) if args.quick else args.trials
    only = set(filter(None, args.only.split(",")))
    started = time.time()
    rows, seeds = [], {}

    def add(section, design, truth, found, claim, **extra):
        rows.append({"section": section, "design": design, "truth": truth, "claim": claim, **found, **extra})
        print(f"{section:10s} {design:70s} {truth:10s} {found['starred']['rate']:.2%} ± {found['starred']['se']:.2%}"
              f" cov {found.get('coverage', {}).get('rate', float('nan')):.1%} | {claim}", flush=True)

    for index, (name, section) in enumerate(SECTIONS.items()):
        seeds[name] = args.seed + 101 * index
        if not only or name in only:
            section(np.random.default_rng(seeds[name]), trials, add)
    seconds = time.time() - started
    result = {"seeds": seeds, "base_seed": args.seed, "trials": trials, "machine": lscpu(),
              "load_average": [round(v, 2) for v in os.getloadavg()], "seconds": round(seconds, 1),
              "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    args.out.with_suffix(".md").write_text(markdown(result), encoding="utf-8")
    print(f"{seconds:.0f} s")


def markdown(result):
    lines = ["# Independent check of docs/verdicts.md's error rates", "",
             f"`benchmarks/bench_independent_verdicts.py`; {result['date_utc']}; {describe(result['machine'])} "
             f"(a shared 2-core Intel Xeon KVM); load average {result['load_average']}; {result['seconds']:.0f} s in "
             f"one process. Seeds by section {result['seeds']} (base {result['base_seed']}); {result['trials']} "
             "trials a row unless its n says otherwise. The simulator is this file's own (lognormal calls around a "
             "per-process level, a machine state per round, drift, step, stalls; nothing from tests/hostsim.py or "
             "tests/autosim.py); every verdict is made by the report's own functions. ± is one binomial standard "
             "error. Margin 3%. \"starred\" at no change is the false-star rate; at a change, starred either way.", "",
             "| section | design | truth | starred (± SE) | right way | 95% coverage | n | docs claim |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        s = r["starred"]
        right = r.get("right_way", {}).get("rate")
        cov = r.get("coverage", {}).get("rate")
        extra = []
        if "unpaired_right_way" in r:
            extra.append(f"unpaired {r['unpaired_right_way']['rate']:.1%}")
        if "processes_a_cell" in r:
            extra.append(f"{r['processes_a_cell']:.2f} processes a cell")
        if "starred_by_stop" in r:
            extra.append("stars by stop: " + ", ".join(f"{k} {v:.2%}" for k, v in r["starred_by_stop"].items()))
        if "before" in r:
            extra.append(f"Welch's df (before): {r['before']['rate']:.2%} ± {r['before']['se']:.2%}")
        if "report_simulated_rate" in r:
            extra.append(f"report's simulated rate {r['report_simulated_rate']:.2%}")
        right_text = "" if right is None else f"{right:.1%}"
        detail = "; ".join(extra)
        lines.append(f"| {r['section']} | {r['design']} | {r['truth']} | {s['rate']:.2%} ± {s['se']:.2%} | "
                     f"{right_text}{' (' + detail + ')' if detail and right_text else detail} | "
                     f"{'' if cov is None else f'{cov:.1%}'} | {s['trials']} | {r['claim']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
