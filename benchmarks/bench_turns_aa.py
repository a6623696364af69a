"""Image changes in turns, through the product (issue 34): the same A/A run with and without ``turns``, and in
turns with both sides' blocks pinned to the same cores (``turns_cores``).

``matrixbench run --aa IMAGE`` runs one image twice under two names (IMAGE and IMAGE-aa), so every departure of
their ratio from 1 is noise. This runs it once per design (``--designs``), as a user would, into runs of one
results folder: ``plain`` without turns, ``turns`` with ``--set turns=true``, ``pinned`` with that and
``--set turns_cores=N`` (``--pin``); and reads their records:
- without turns: each round's log(aa process mean / original's), what the report's "paired by round" judges;
- in turns (pinned or not): each round's median over its block pairs of log(aa block / original's block), what
  "in turns" judges (report.stats.turn_log_ratio); the records' ``timing.turns.cores`` and ``threads`` are
  counted, so the table says what the blocks really ran on.
Over rounds, per cell: the SD of those log ratios (the noise a comparison of that design sees) and the power
at 3 rounds to star a true +10% change (``bench_cross_process.power_at``), and the report's verdict row.

    python benchmarks/bench_turns_aa.py --matrix FILE [--image latest] [--models resnet] [--modes eager]
        [--repeats 6] [--cycles 1] [--iterations 300] [--device cpu|cuda] [--backend local] [--results DIR] [--out DIR]
        [--designs plain,turns] [--pin 1] [--name turns_aa] [--only-summarize]

The runs land in ``--results`` (runs aa-plain-1, aa-turns-1, then per ``--cycles`` the designs in reverse order:
aa-turns-2, aa-plain-2, ...); ``--only-summarize`` reads runs already there. SIGTERM (a budget's ``timeout``, which
signals the run too: it stops, keeping its records) starts no further run, and the results are written from the
runs so far, saying which were not reached.
"""
import argparse
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_cross_process import power_at  # noqa: E402
from benchmarks.machine import write_results  # noqa: E402
from runner.schema import RecordError, read_record  # noqa: E402

UPPER_LEVEL = 0.90   # the one-sided confidence of the SD's upper bound (a few rounds estimate an SD poorly)
GOAL_POWER = 0.5     # issue 34: a true +10% image change starred at 3 processes at least half the time
DESIGNS = ("plain", "turns", "pinned")   # without turns; in turns; in turns, the blocks pinned (turns_cores)


def design_settings(design, pin):
    """The ``--set`` values of a design."""
    return {"plain": ["turns=false"], "turns": ["turns=true"], "pinned": ["turns=true", f"turns_cores={pin}"]}[design]


def runs(cycles, designs=("plain", "turns")):
    """(run name, design, in turns) of ``cycles`` cycles, the designs' order reversed every other cycle so that a
    machine that gets busier or quieter falls on all: aa-plain-1, aa-turns-1, aa-turns-2, aa-plain-2..."""
    found = []
    for cycle in range(1, cycles + 1):
        order = list(designs) if cycle % 2 else list(designs)[::-1]
        found += [(f"aa-{design}-{cycle}", f"aa-{design}", design != "plain") for design in order]
    return found


STOPPED = {"by": None}


def _stop(signum, frame):
    """SIGTERM: let the run in progress stop by itself (it got the signal too), start no other."""
    STOPPED["by"] = signal.Signals(signum).name


def run_designs(args):
    """The runs, one after the other, each with its seconds and the load average before and after; after a
    SIGTERM, none more (``not reached``)."""
    took = {}
    signal.signal(signal.SIGTERM, _stop)
    for run, design, _ in runs(args.cycles, args.designs):
        if STOPPED["by"]:
            took[run] = {"not_reached": STOPPED["by"]}
            continue
        before = os.getloadavg()
        argv = [sys.executable, "-m", "matrixbench.cli", "run", "--matrix", args.matrix, "--aa", args.image,
                "--backend", args.backend, "--device", args.device, "--results", args.results, "--run", run,
                "--models", args.models, "--modes", args.modes, "--repeats", str(args.repeats),
                "--iterations", str(args.iterations)]
        argv += [item for value in design_settings(design[len("aa-"):], args.pin) for item in ("--set", value)]
        started = time.monotonic()
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        done = subprocess.run(argv, cwd=ROOT, env=dict(os.environ, PYTHONPATH=path))
        took[run] = {"seconds": time.monotonic() - started, "exit": done.returncode, "load_before": before,
                     "load_after": os.getloadavg()}
    return took


def records(folder):
    """{(cell id, repeat): record} of a run's image folder (ok records only)."""
    found = {}
    for path in sorted(Path(folder).glob("*.json")):
        try:
            record = read_record(path)
        except (RecordError, OSError, ValueError):
            continue
        if record.get("status") == "ok":
            found[(record["cell_id"], record.get("repeat", 0))] = record
    return found


def pinning(found):
    """How the blocks of a run's records in turns ran: {"cores C, threads T": processes} (``unpinned`` where the
    record says no cores; ``unknown`` for a record without the fields)."""
    counts = {}
    for record in found.values():
        turns = (record.get("timing") or {}).get("turns")
        if not turns:
            continue
        if "cores" not in turns:
            how = "unknown"
        else:
            cores = turns.get("cores")
            how = f"cores {','.join(map(str, cores))}" if cores else "unpinned"
            how += f", {turns.get('threads')} torch thread(s)" + (f", pin failed: {turns['pin_error']}"
                                                                  if turns.get("pin_error") else "")
        counts[how] = counts.get(how, 0) + 1
    return counts


def round_logs(original, twin, turns):
    """Per cell: [(repeat, log ratio)] of the rounds both sides have, by the design's reduction."""
    by_cell = {}
    for (cell, repeat), base in sorted(original.items()):
        other = twin.get((cell, repeat))
        if other is None:
            continue
        if turns:
            a, b = base["timing"].get("turns") or {}, other["timing"].get("turns") or {}
            pairs = [math.log(y / x) for x, y in zip(a.get("block_ms") or [], b.get("block_ms") or []) if x > 0 < y]
            if not pairs or a.get("pair_id") != b.get("pair_id") or a.get("cores") != b.get("cores"):
                continue
            value = statistics.median(pairs)
        else:
            value = math.log(other["timing"]["mean_ms"] / base["timing"]["mean_ms"])
        by_cell.setdefault(cell, []).append((repeat, value))
    return by_cell


def sd_upper(sd, rounds, level=UPPER_LEVEL):
    """The one-sided ``level`` upper confidence bound of an SD over ``rounds`` normal draws (chi-square, rounds - 1
    df): at 4 rounds the SD a design truly has can be 2.4x the one seen, so a decision says both."""
    from scipy.stats import chi2
    return sd * math.sqrt((rounds - 1) / chi2.ppf(1.0 - level, rounds - 1)) if rounds > 1 else float("nan")


def summarize(args):
    """Per cell and design: the rounds' log ratios of all its cycles' runs, their mean, SD and power."""
    results = Path(args.results)
    pooled, pins = {}, {}
    for run, design, turns in runs(args.cycles, args.designs):
        original = records(results / run / args.image)
        twin = records(results / run / f"{args.image}-aa")
        for how, count in pinning({**{("a",) + key: r for key, r in original.items()},
                                   **{("b",) + key: r for key, r in twin.items()}}).items():
            pins.setdefault(design, {}).setdefault(how, 0)
            pins[design][how] += count
        for cell, logs in round_logs(original, twin, turns).items():
            pooled.setdefault(cell, {}).setdefault(design, []).extend(value for _, value in logs)
    out = {}
    for cell, designs in pooled.items():
        for design, values in designs.items():
            sd = statistics.stdev(values) if len(values) > 1 else float("nan")
            upper = sd_upper(sd, len(values))
            out.setdefault(cell, {})[design] = {"rounds": len(values), "logs": values,
                                             "mean": statistics.fmean(values), "sd": sd, "sd_upper_90": upper,
                                             "power_3_rounds_at_10pct": power_at(sd) if sd == sd else None,
                                             "power_at_sd_upper": power_at(upper) if upper == upper else None}
    return out, pins


def goal_line(cells):
    """Issue 34's goal, said with the SD's uncertainty: met by the SD seen, and whether also at its upper bound."""
    seen = [(cell, run, found) for cell, designs in sorted(cells.items()) for run, found in sorted(designs.items())
            if (found["power_3_rounds_at_10pct"] or 0) >= GOAL_POWER]
    line = (f"Issue 34's goal, {GOAL_POWER:.0%} power at 3 rounds for a true +10% (an SD over rounds of about 0.045 "
            "or less): ")
    if not seen:
        return line + "met by no design here."
    sure = [f"{run} ({cell})" for cell, run, found in seen if (found.get("power_at_sd_upper") or 0) >= GOAL_POWER]
    line += "met by " + ", ".join(f"{run} ({cell})" for cell, run, _ in seen) + " at the SD seen; "
    return line + (f"at its {UPPER_LEVEL:.0%} upper bound too by " + ", ".join(sure) + "." if sure else
                   f"by none at its {UPPER_LEVEL:.0%} upper bound: more rounds would settle it.")


def markdown(result):
    m = result["settings"]
    designs = m.get("designs", ["plain", "turns"])
    said = {"plain": "without turns (runs aa-plain-*: the report pairs by round)",
            "turns": "with `--set turns=true` (runs aa-turns-*: the report judges in turns)",
            "pinned": f"with `--set turns=true --set turns_cores={m.get('pin')}` (runs aa-pinned-*: in turns, both "
                      "sides' blocks pinned to the same cores)"}
    lines = [f"# A/A through the product, with and without turns ({m['device']}, {m['models']} {m['modes']})", "",
             (f"Measured {result['when']}" if "runs" in result else
              f"Summarized {result['when']} (`--only-summarize`) from runs measured earlier")
             + f" with `matrixbench run --aa {m['image']}` ({m['backend']} backend, "
             f"{m['repeats']} rounds, {m['iterations']} iterations a process), {m['cycles']} time(s) each: "
             + "; ".join(said[design] for design in designs) + ". The order was reversed each cycle; a design's "
             "rounds are pooled over its runs. The true ratio is 1: every log ratio is noise. Power: a true +10% "
             "change starred at 3 rounds (Student's t on the rounds' log ratios).", "",
             f"Load average before {result['load_average']}; {result['seconds']:.0f} s in all.", "",
             f"| cell | design | rounds | mean log ratio | SD over rounds | its {UPPER_LEVEL:.0%} upper bound | "
             "power at 3 rounds | at the upper bound |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    def percent(value):
        return "-" if value is None else f"{value:.0%}"
    for cell, designs in sorted(result["cells"].items()):
        for run, found in sorted(designs.items()):
            upper = found.get("sd_upper_90")
            lines.append(f"| {cell} | {run} | {found['rounds']} | {found['mean']:+.3f} | {found['sd']:.3f} | "
                         f"{'-' if upper is None or upper != upper else f'{upper:.3f}'} | "
                         f"{percent(found['power_3_rounds_at_10pct'])} | {percent(found.get('power_at_sd_upper'))} |")
    lines += ["", goal_line(result["cells"])]
    if result.get("pinning"):
        lines += ["", "Where the blocks in turns ran, as the records say (processes):", ""]
        lines += [f"- {design}: " + "; ".join(f"{how}: {count}" for how, count in sorted(hows.items()))
                  for design, hows in sorted(result["pinning"].items())]
    lines += ["", "Runs, in order (seconds, exit, load average before -> after):", ""]
    lines += [f"- {run}: not reached ({took['not_reached']} before it started)" if "not_reached" in took else
              f"- {run}: {took['seconds']:.0f} s, exit {took['exit']}, load {took['load_before'][0]:.1f} -> "
              f"{took['load_after'][0]:.1f}" for run, took in result.get("runs", {}).items()]
    lines.append("")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", required=True)
    parser.add_argument("--image", default="latest")
    parser.add_argument("--models", default="resnet")
    parser.add_argument("--modes", default="eager")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--cycles", type=int, default=1, help="runs of each design, their order swapped each cycle")
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backend", default="local")
    parser.add_argument("--results", default="results")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--name", default="turns_aa")
    parser.add_argument("--designs", default="plain,turns",
                        help=f"comma-separated, of {', '.join(DESIGNS)}: the runs of each cycle, in order")
    parser.add_argument("--pin", type=int, default=1, help="turns_cores of the pinned design")
    parser.add_argument("--only-summarize", action="store_true")
    args = parser.parse_args()
    args.designs = [design.strip() for design in args.designs.split(",") if design.strip()]
    if not args.designs or set(args.designs) - set(DESIGNS):
        parser.error(f"--designs: comma-separated, of {', '.join(DESIGNS)}; got {','.join(args.designs)!r}")
    started, load = time.monotonic(), os.getloadavg()
    result = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "settings": {key: getattr(args, key) for key in ("image", "models", "modes", "repeats", "iterations",
                                                                "cycles", "device", "backend", "designs",
                                                                "pin")}}
    if not args.only_summarize:
        result["runs"] = run_designs(args)
    result["cells"], result["pinning"] = summarize(args)
    write_results(Path(args.out), args.name, result, markdown, load=load, started=started)


if __name__ == "__main__":
    main()
