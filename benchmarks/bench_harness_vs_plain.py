"""The harness against the seed's own method: does the runner time a cell as a plain loop would?

The same cell (full-size model, batch size 1, random weights, CPU, float32) is timed two ways,
each in a fresh process, interleaved A B A B over ``--rounds`` rounds:

- runner: ``python -m runner --models M --modes MODE --iterations N ...``; its record's mean_ms;
- plain: the seed page's method -- build the model, preprocess the test image,
  ``torch.compile(model)`` as the page writes it (``default``; another mode is passed as
  ``mode=``), the first call (it compiles), warm up, time N calls with ``time.perf_counter``
  around each, take the mean. The model and its inputs come from ``runner.models.build`` (the
  same random weights and the same preprocessed image), and the warm-up is the runner's own
  count after the first call (``runner.records.effective_warmup``: at least 3, whatever
  ``--warmup`` asks), so only the timing method and the harness differ.

Both share one Inductor cache folder (warm after the first compile, as in a real run). Per
(model, mode): the ratio runner/plain per round, its geometric mean with a bootstrap 95%
interval over rounds, and each side's between-round CV. A verdict ("the runner agrees with a
plain loop within X%") is printed only when the noise allows one: when the between-round CV of
either side exceeds ``--resolve`` (the difference the script is asked to resolve, default 5%),
or the interval is wider than twice it, the script says the machine was too noisy instead.
``--budget-s`` starts no new round once spent, but never stops before ``MIN_ROUNDS`` (5) rounds.

    python benchmarks/bench_harness_vs_plain.py [--device cpu|cuda] [--models resnet,vit] [--modes eager,default]
        [--rounds 5] [--iterations 20] [--warmup 3] [--budget-s 600] [--resolve 0.05] [--out benchmarks/results]

Writes <out>/<name>.json and .md (default name harness_vs_plain) with the machine, its load average before and after.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import contention, describe, describe_contention, lscpu  # noqa: E402
from runner.records import effective_warmup  # noqa: E402


def cell_dict(model, mode):
    return {"model": model, "task": "image-classification", "weights": "random", "size": "full",
            "batch_size": 1, "mode": mode, "fullgraph": False, "dtype": "float32"}


def plain_worker(model, mode, iterations, warmup, device="cpu"):
    """The seed page's loop, in this (fresh) process; prints the mean in ms as JSON. On a GPU each
    call is synchronized before its clock stops (the page's perf_counter loop, made to count the GPU work)."""
    import torch

    from runner.core import Cell
    from runner.models import SEED_MODELS, build

    spec = SEED_MODELS[model]
    cell = Cell.from_dict(dict(cell_dict(model, mode), model_id=spec.model_id, task=spec.task))
    built = build(cell, device, "float32")
    step = seed_compile(torch, built.model, mode)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    with torch.no_grad():
        for _ in range(1 + effective_warmup(warmup)):       # the first call compiles, then the warm-up
            step(**built.inputs)
        sync()
        for _ in range(iterations):
            start = time.perf_counter()
            step(**built.inputs)
            sync()
            times.append(time.perf_counter() - start)
    print(json.dumps({"mean_ms": 1000 * statistics.fmean(times)}))


def seed_compile(torch, model, mode):
    """The seed page's compile: ``torch.compile(model)`` for default, the model itself for eager."""
    if mode == "eager":
        return model
    return torch.compile(model) if mode == "default" else torch.compile(model, mode=mode)


def run_plain(model, mode, args, env):
    argv = [sys.executable, __file__, "--plain-worker", model, mode, "--iterations", str(args.iterations),
            "--warmup", str(args.warmup), "--device", args.device]
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])["mean_ms"]


def run_runner(model, mode, args, env):
    with tempfile.TemporaryDirectory() as out:
        argv = [sys.executable, "-m", "runner", "--out", out, "--models", model, "--modes", mode,
                "--iterations", str(args.iterations), "--warmup", str(args.warmup), "--device", args.device]
        subprocess.run(argv, env=env, check=True, capture_output=True, text=True, cwd=ROOT)
        record = json.loads(next(Path(out).glob("*.json")).read_text())
    if record["status"] != "ok":
        raise SystemExit(f"runner cell {model} {mode} failed: {record['error']}")
    return record["timing"]["mean_ms"], record["environment"]


def bootstrap_ratio(runner, plain, rng, draws=10000):
    """Geometric-mean ratio runner/plain over rounds and its 95% interval (rounds resampled)."""
    logs = np.log(np.asarray(runner) / np.asarray(plain))
    picks = rng.integers(0, len(logs), size=(draws, len(logs)))
    boot = np.exp(logs[picks].mean(axis=1))
    return float(np.exp(logs.mean())), [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]


def cv(values):
    return float(statistics.stdev(values) / statistics.fmean(values)) if len(values) > 1 else None


def verdict(summary, resolve):
    """What may be said of one (model, mode), or why nothing may."""
    low, high = summary["ratio_ci95"]
    noise = max(summary["runner_cv"], summary["plain_cv"])
    if noise > resolve or (high - low) > 2 * resolve:
        return (f"no verdict: between-round CV {noise:.1%} / interval width {high - low:.1%} exceed "
                f"the {resolve:.0%} this is asked to resolve (machine too noisy)")
    if low <= 1 <= high or (abs(low - 1) < resolve and abs(high - 1) < resolve):
        return f"the runner agrees with a plain loop within {resolve:.0%}"
    return f"the runner differs from a plain loop: ratio {summary['ratio']:.3f} [{low:.3f}, {high:.3f}]"


MIN_ROUNDS = 5


def measure(args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    cache = tempfile.mkdtemp(prefix="harness-vs-plain-cache-")
    env.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"), TRITON_CACHE_DIR=os.path.join(cache, "triton"))
    rounds, environment, started = [], None, time.monotonic()
    for index in range(args.rounds):
        if index >= min(MIN_ROUNDS, args.rounds) and time.monotonic() - started > args.budget_s:
            print(f"stopping after {index} rounds: the {args.budget_s:.0f} s budget is spent", file=sys.stderr)
            break
        for model in args.models:
            for mode in args.modes:
                load = os.getloadavg()
                runner_ms, environment = run_runner(model, mode, args, env)
                plain_ms = run_plain(model, mode, args, env)
                rounds.append({"round": index, "model": model, "mode": mode, "runner_ms": runner_ms,
                               "plain_ms": plain_ms, "loadavg": load})
                print(f"round {index} {model} {mode}: runner {runner_ms:.2f} ms, plain {plain_ms:.2f} ms, "
                      f"load {load[0]:.2f}", file=sys.stderr, flush=True)
    return rounds, environment


def summarize(rounds, args):
    rng = np.random.default_rng(0)
    out = []
    for model in args.models:
        for mode in args.modes:
            rows = [r for r in rounds if r["model"] == model and r["mode"] == mode]
            runner, plain = [r["runner_ms"] for r in rows], [r["plain_ms"] for r in rows]
            ratio, interval = bootstrap_ratio(runner, plain, rng)
            summary = {"model": model, "mode": mode, "rounds": len(rows), "ratio": ratio, "ratio_ci95": interval,
                       "runner_mean_ms": statistics.fmean(runner), "plain_mean_ms": statistics.fmean(plain),
                       "runner_cv": cv(runner), "plain_cv": cv(plain),
                       "runner_range_ms": [min(runner), max(runner)], "plain_range_ms": [min(plain), max(plain)]}
            summary["verdict"] = verdict(summary, args.resolve)
            out.append(summary)
    return out


def markdown(result):
    m = result["machine"]
    title = f"# Harness vs plain loop ({m['cpu_model']}, {m['cores']} cores, torch {m['torch']})"
    rounds = max(r["round"] for r in result["rounds"]) + 1
    lines = [title, "",
             f"{rounds} rounds A B A B, {result['settings']['iterations']} timed calls, "
             f"{result['warmup_calls']} warm-up calls after the first (both sides); load average before "
             f"{result['loadavg_before']}, after {result['loadavg_after']} (1, 5, 15 min; the machine's cores "
             f"are shared with other work, see each round's load in the JSON).", "",
             describe(m.get("lscpu", {})), "",
             f"CPU contention before -> after: {describe_contention(result.get('contention_before', {}))} -> "
             f"{describe_contention(result.get('contention_after', {}))}.", "",
             "| model | mode | runner mean ms (range) | plain mean ms (range) | runner CV | plain CV | "
             "ratio runner/plain [95% CI] | verdict |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in result["summary"]:
        lines.append(f"| {s['model']} | {s['mode']} | {s['runner_mean_ms']:.1f} ({s['runner_range_ms'][0]:.1f}–"
                     f"{s['runner_range_ms'][1]:.1f}) | {s['plain_mean_ms']:.1f} ({s['plain_range_ms'][0]:.1f}–"
                     f"{s['plain_range_ms'][1]:.1f}) | {s['runner_cv']:.1%} | {s['plain_cv']:.1%} | "
                     f"{s['ratio']:.3f} [{s['ratio_ci95'][0]:.3f}, {s['ratio_ci95'][1]:.3f}] | {s['verdict']} |")
    return "\n".join(lines) + "\n"


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plain-worker", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    parser.add_argument("--models", type=lambda s: s.split(","), default=["resnet", "vit"])
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["eager", "default"])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: both sides on GPU 0 (the plain loop synchronizes each call)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=600,
                        help=f"start no new round (after the {MIN_ROUNDS}th) once this many seconds have passed")
    parser.add_argument("--resolve", type=float, default=0.05, help="the relative difference to resolve")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--name", default="harness_vs_plain", help="the result files' name (<out>/<name>.json, .md)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    if args.plain_worker:
        return plain_worker(*args.plain_worker, args.iterations, args.warmup, args.device)
    before, pressure, started = os.getloadavg(), contention(), time.time()
    rounds, environment = measure(args)
    result = {"settings": {k: v for k, v in vars(args).items() if k not in ("out", "plain_worker", "name")},
              "warmup_calls": effective_warmup(args.warmup),
              "machine": {"cpu_model": environment["cpu_model"], "cores": os.cpu_count(), "lscpu": lscpu(),
                          "gpu_name": environment.get("gpu_name"), "driver": environment.get("driver"),
                          "torch": environment["torch"], "transformers": environment["transformers"],
                          "python": environment["python"], "platform": platform.platform()},
              "loadavg_before": [round(x, 2) for x in before], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
              "contention_before": pressure, "contention_after": contention(),
              "wall_s": round(time.time() - started, 1), "rounds": rounds, "summary": summarize(rounds, args)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    (args.out / f"{args.name}.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
