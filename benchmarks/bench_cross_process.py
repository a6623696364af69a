"""Does the host's state cancel between two processes that take turns? (issue 34: image changes, launch-bound)

An image change compares two processes (two torch versions), and on a VM a launch-bound cell's process level
moves by 25-70% (the H100 and H200 evidence). Paired blocks cancel that level out of a speed-up because eager and
compiled blocks run in one process. Two processes alive at once, timing blocks in turns (runner.baton), would
cancel it out of an image change too, if the level is the host's (a neighbour, the hypervisor) and not each
process's own. This measures which, as an A/A experiment: both sides run the same cell in the same interpreter,
so the true ratio is 1 and every departure from it is noise.

Each round starts two worker processes at once (``first`` and ``second``, their labels A and B swapped every
other round). Each builds the cell and warms up; then, taking turns over the baton:
  1. own loops: first times ``--own-calls`` calls, then second does (the unpaired design: two processes of a
     round, one after the other, as the executor runs them);
  2. alternating blocks: ``--blocks`` blocks of ``--block-calls`` calls each, first, second, first, second...
Per round: the unpaired log ratio log(A own mean / B own mean) and the paired one, the median over block pairs of
log(A block mean / B block mean). Over rounds: the SD of each (the noise a comparison of that design sees) and the
power it would have at 3 rounds to star a true +10% change (Student's t on the per-round log ratios, 2 df).

``--load N`` runs N busy processes beside the workers, each stopped and continued at random (exponential dwells,
``--load-dwell-s``) for the whole run: a host-wide state of known timing. Without it the machine's own noise is
what is measured (on a GPU VM: the host the issue is about).

    python benchmarks/bench_cross_process.py [--device cpu|cuda] [--model resnet] [--size tiny|full]
        [--mode eager] [--rounds 8] [--own-calls 300] [--blocks 10] [--block-calls 30] [--warmup 20]
        [--threads 1] [--cores 1] [--load 0] [--load-dwell-s 1.0] [--seed 1] [--out benchmarks/results]
        [--name cross_process]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.load import Load  # noqa: E402
from benchmarks.machine import contention, describe, describe_contention, lscpu  # noqa: E402

TARGET_CHANGE = 0.10     # the issue's +10% image change
ROUNDS_AT = 3            # the default repeats


# --- the worker: one side of a round ---------------------------------------------------------------------------

def worker(args):
    import torch

    from runner.baton import Baton
    from runner.core import Cell
    from runner.models import SEED_MODELS, build
    from runner.timing import time_iterations

    if args.cores:
        os.sched_setaffinity(0, {int(core) for core in args.cores.split(",")})
    if args.threads:
        torch.set_num_threads(args.threads)
    spec = SEED_MODELS[args.model]
    cell = Cell.from_dict({"model": args.model, "task": spec.task, "model_id": spec.model_id, "weights": "random",
                           "size": args.size, "batch_size": 1, "mode": args.mode, "fullgraph": False,
                           "dtype": "float32"})
    built = build(cell, args.device, "float32")
    model = built.model if args.mode == "eager" else torch.compile(built.model, mode=args.mode)

    def step():
        return model(**built.inputs)

    with torch.no_grad():
        for _ in range(max(1, args.warmup)):
            step()
        if args.device == "cuda":
            torch.cuda.synchronize()
        with Baton(Path(args.folder), args.worker, timeout_s=args.baton_timeout_s) as baton:
            out = take_turns(baton, lambda calls: time_iterations(step, calls, args.device).samples_ms, args)
    Path(args.json).write_text(json.dumps(out))


def take_turns(baton, time_calls, args):
    """This side's turns: its own loop, then its blocks, each after the partner's turn (``first`` starts)."""
    segments = [("own", args.own_calls)] + [("block", args.block_calls)] * args.blocks
    out = {"role": args.worker, "own": None, "blocks": [], "block_medians": [], "starts": []}
    for index in baton.take(2 * len(segments)):
        kind, calls = segments[index // 2]
        out["starts"].append(time.time())
        samples = time_calls(calls)
        if kind == "own":
            out["own"] = {"mean_ms": statistics.fmean(samples), "median_ms": statistics.median(samples)}
        else:
            out["blocks"].append(statistics.fmean(samples))
            out["block_medians"].append(statistics.median(samples))
    return out


# --- the driver -------------------------------------------------------------------------------------------------

def one_round(index, args, env):
    """Both workers at once; returns the round's row (A is ``first`` in even rounds, ``second`` in odd ones)."""
    with tempfile.TemporaryDirectory(prefix="xp-") as folder:
        procs, files = {}, {}
        for role in ("first", "second"):
            files[role] = os.path.join(folder, f"{role}.json")
            argv = [sys.executable, __file__, "--worker", role, "--folder", folder, "--json", files[role]]
            argv += [f"--{k.replace('_', '-')}={v}" for k, v in (
                ("device", args.device), ("model", args.model), ("size", args.size), ("mode", args.mode),
                ("own_calls", args.own_calls), ("blocks", args.blocks), ("block_calls", args.block_calls),
                ("warmup", args.warmup), ("threads", args.threads), ("baton_timeout_s", args.baton_timeout_s),
                ("cores", args.cores))]
            procs[role] = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True)
        for role, proc in procs.items():
            _, err = proc.communicate(timeout=args.round_timeout_s)
            if proc.returncode:
                raise SystemExit(f"round {index}: the {role} worker failed ({proc.returncode}):\n{err[-2000:]}")
        sides = {role: json.loads(Path(files[role]).read_text()) for role in files}
    a, b = (sides["first"], sides["second"]) if index % 2 == 0 else (sides["second"], sides["first"])
    pair_logs = [math.log(x / y) for x, y in zip(a["blocks"], b["blocks"])]
    median_logs = [math.log(x / y) for x, y in zip(a["block_medians"], b["block_medians"])]
    return {"round": index, "a_first": index % 2 == 0,
            "a_own_ms": a["own"]["mean_ms"], "b_own_ms": b["own"]["mean_ms"],
            "unpaired_log": math.log(a["own"]["mean_ms"] / b["own"]["mean_ms"]),
            "unpaired_median_log": math.log(a["own"]["median_ms"] / b["own"]["median_ms"]),
            "paired_log": statistics.median(pair_logs), "paired_mean_log": statistics.fmean(pair_logs),
            "paired_median_log": statistics.median(median_logs),
            "a_blocks_ms": a["blocks"], "b_blocks_ms": b["blocks"],
            "span_s": max(a["starts"] + b["starts"]) - min(a["starts"] + b["starts"])}


def power_at(sd, rounds=ROUNDS_AT, change=TARGET_CHANGE, alpha=0.05):
    """Power of a two-sided one-sample t-test on ``rounds`` per-round log ratios of SD ``sd`` to find a true
    ``change`` (noncentral t)."""
    from scipy import stats
    if not sd or sd <= 0:
        return 1.0
    df = rounds - 1
    crit = stats.t.ppf(1 - alpha / 2, df)
    shift = math.log1p(change) / (sd / math.sqrt(rounds))
    power = float(stats.nct.sf(crit, df, shift) + stats.nct.cdf(-crit, df, shift))
    return 1.0 if math.isnan(power) and shift > crit else power    # scipy's nct gives nan far out in the tail


def summarize(rows):
    out = {}
    for key in ("unpaired_log", "unpaired_median_log", "paired_log", "paired_mean_log", "paired_median_log"):
        values = [r[key] for r in rows]
        sd = statistics.stdev(values) if len(values) > 1 else float("nan")
        out[key] = {"mean": statistics.fmean(values), "sd": sd, "power_3_rounds_at_10pct": power_at(sd)}
    out["sd_ratio_unpaired_over_paired"] = out["unpaired_log"]["sd"] / out["paired_log"]["sd"]
    return out


def markdown(result):
    s, m = result["summary"], result["settings"]
    load = result.get("load")
    lines = [f"# Two processes taking turns: does the host's state cancel? ({m['device']}, {m['model']} {m['size']} "
             f"{m['mode']})", "",
             f"Measured {result['when']}; {len(result['rounds'])} rounds of an A/A pair (same cell, same "
             f"interpreter: the true ratio is 1); own loops {m['own_calls']} calls, then {m['blocks']} blocks of "
             f"{m['block_calls']} calls a side in turns; torch threads {m['threads'] or 'default'}; "
             f"{'both pinned to cores ' + m['cores'] if m.get('cores') else 'not pinned'}; "
             f"{result['seconds']:.0f} s.", "",
             describe(result["lscpu"]), "",
             f"Load average before {result['loadavg_before']}, after {result['loadavg_after']}; contention "
             f"{describe_contention(result['contention_before'])} -> "
             f"{describe_contention(result['contention_after'])}.",
             ""]
    if load:
        lines += [f"Competing load: {load['count']} busy processes switched on and off at random (mean dwell "
                  f"{load['dwell_s']} s, {load['switches']} switches, on {load['on_share']:.0%} of the time).", ""]
    lines += ["| round | A first | A own ms | B own ms | unpaired log(A/B) | paired log(A/B) (median of block pairs) |",
              "| ---: | --- | ---: | ---: | ---: | ---: |"]
    for r in result["rounds"]:
        lines.append(f"| {r['round']} | {r['a_first']} | {r['a_own_ms']:.3f} | {r['b_own_ms']:.3f} | "
                     f"{r['unpaired_log']:+.3f} | {r['paired_log']:+.3f} |")
    lines += ["", "| design | mean log ratio (true 0) | SD over rounds | power at 3 rounds, true +10% |",
              "| --- | ---: | ---: | ---: |"]
    names = {"unpaired_log": "unpaired: own loops, one after the other (today)",
             "unpaired_median_log": "unpaired, each loop's median call",
             "paired_log": "paired blocks in turns (median of pair log ratios)",
             "paired_mean_log": "paired blocks in turns (mean of pair log ratios)",
             "paired_median_log": "paired blocks in turns (block medians)"}
    for key, name in names.items():
        v = s[key]
        lines.append(f"| {name} | {v['mean']:+.4f} | {v['sd']:.4f} | {v['power_3_rounds_at_10pct']:.0%} |")
    lines += ["", f"Unpaired SD / paired SD: {s['sd_ratio_unpaired_over_paired']:.2f}."]
    return "\n".join(lines) + "\n"


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=("first", "second"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--model", default="resnet")
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--mode", default="eager")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--own-calls", type=int, default=300)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--block-calls", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="torch threads a worker (0: torch's default; with "
                        "--cores, at most that many: the waiting side's OpenMP threads spin on the shared cores)")
    parser.add_argument("--cores", default="", help="pin both workers to these cores (comma-separated): a level "
                        "that comes from where a process runs is then shared")
    parser.add_argument("--load", type=int, default=0, help="busy processes switched on and off at random")
    parser.add_argument("--load-dwell-s", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--baton-timeout-s", type=float, default=300.0)
    parser.add_argument("--round-timeout-s", type=float, default=900.0)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--name", default="cross_process")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    if args.worker:
        return worker(args)
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    result = {"settings": {k: getattr(args, k) for k in ("device", "model", "size", "mode", "own_calls", "blocks",
                                                         "block_calls", "warmup", "threads", "load", "seed",
                                                         "cores")},
              "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "lscpu": lscpu(), "loadavg_before": os.getloadavg(),
              "contention_before": contention(), "rounds": []}
    started, began = time.monotonic(), time.time()
    load = Load(args.seed, args.load, lambda rng: rng.expovariate(1.0 / args.load_dwell_s)).start() \
        if args.load else None
    try:
        for index in range(args.rounds):
            row = one_round(index, args, env)
            result["rounds"].append(row)
            print(f"round {index}: unpaired {row['unpaired_log']:+.3f}, paired {row['paired_log']:+.3f}",
                  file=sys.stderr, flush=True)
    finally:
        if load:
            load.close()
            result["load"] = {"count": args.load, "dwell_s": args.load_dwell_s, "switches": len(load.switches) - 2,
                              "on_share": load.on_share(began, time.time())}
    result.update(seconds=time.monotonic() - started, loadavg_after=os.getloadavg(), contention_after=contention(),
                  summary=summarize(result["rounds"]))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(result, indent=1))
    (out / f"{args.name}.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
