"""Do starred image-to-image changes survive a rerun? Repeats (hierarchical test) vs one process.

Runs a small CPU matrix twice from scratch (two run folders, two empty compile caches) with
``--repeats 3`` through ``matrixbench run --backend local --device cpu``: tiny models, eager and
default, two images. The local backend runs the one torch of this interpreter, so the two
images are the same torch under two names (``a`` and ``b``): every true image-to-image change
is zero, and every star is a false positive. Per run it counts the starred changes (b against
a, per model and mode) under

- the hierarchical test (``matrixbench.report.stats.compare_processes``: resample the 3
  processes, then the samples within each) -- what the report does now;
- the within-process test (the same bootstrap over repeat 0's samples only, one process per
  cell) -- what the report did before repeats;

and how many of run 1's stars keep their sign and star in run 2.

    python benchmarks/bench_repeat_stability.py [--models vit,resnet] [--iterations 20] [--repeats 3]
        [--out benchmarks/results]

Writes <out>/repeat_stability.json and .md with the machine and its load average.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from matrixbench.report import stats  # noqa: E402
from runner.schema import read_record  # noqa: E402


def matrix_file(folder, args):
    import torch

    version = torch.__version__.split("+")[0]
    image = {"torch": f"torch=={version}", "python": f"{sys.version_info.major}.{sys.version_info.minor}",
             "transformers": "transformers", "description": "the interpreter's own torch (--backend local)"}
    data = {"images": {"a": dict(image), "b": dict(image)}, "weights": "random", "size": "tiny",
            "models": {name: MODELS[name] for name in args.models}, "batch_sizes": [1],
            "modes": ["eager", "default"], "dtypes": ["float32"], "iterations": args.iterations,
            "warmup": args.warmup, "repeats": args.repeats, "timeout_s": 600}
    path = Path(folder) / "matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


MODELS = {"vit": {"id": "google/vit-base-patch16-224", "task": "image-classification"},
          "resnet": {"id": "microsoft/resnet-50", "task": "image-classification"},
          "segformer": {"id": "nvidia/segformer-b0-finetuned-ade-512-512", "task": "image-segmentation"}}


def run_once(name, folder, matrix, env):
    argv = [sys.executable, "-c", "from matrixbench.cli import main; main()", "run",
            "--matrix", str(matrix), "--run", name,
            "--results", str(folder / "results"), "--backend", "local", "--device", "cpu",
            "--cache-dir", str(folder / f"cache-{name}")]
    started, load = time.monotonic(), os.getloadavg()
    done = subprocess.run(argv, env=env, cwd=folder, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"run {name} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return {"wall_s": round(time.monotonic() - started, 1), "loadavg_before": load,
            "loadavg_after": os.getloadavg(), "records": _processes(folder / "results" / name)}


def _processes(run_path):
    """{(image, cell_id): {repeat: samples}} of the ok records."""
    found = {}
    for path in sorted(run_path.glob("*/*.json")):
        if path.name == "cells.json":
            continue
        record = read_record(path)
        if record["status"] == "ok":
            key = f"{record['environment']['image_name']}|{record['cell_id']}"
            found.setdefault(key, {})[record.get("repeat", 0)] = record["timing"]["samples_ms"]
    return found


def changes(records):
    """Per cell id: b against a under both tests (change %, significant)."""
    out = {}
    for key, processes in records.items():
        image, cell = key.split("|")
        baseline = records.get(f"a|{cell}")
        if image != "b" or not baseline:
            continue
        hierarchical = stats.compare_processes([baseline[k] for k in sorted(baseline)],
                                               [processes[k] for k in sorted(processes)])
        low, high = stats.hierarchical_interval([baseline[0]], [processes[0]])
        within = stats.compare_processes([baseline[0]], [processes[0]]).change_pct
        out[cell] = {"hierarchical": {"change_pct": hierarchical.change_pct, "low_pct": hierarchical.low_pct,
                                      "high_pct": hierarchical.high_pct, "star": bool(hierarchical.significant)},
                     "within_process": {"change_pct": within, "low_pct": 100 * (low - 1), "high_pct": 100 * (high - 1),
                                        "star": low > 1 or high < 1}}
    return out


def survival(first, second, test):
    starred = [cell for cell, c in first.items() if c[test]["star"]]
    kept = [cell for cell in starred if cell in second and second[cell][test]["star"]
            and (second[cell][test]["change_pct"] > 0) == (first[cell][test]["change_pct"] > 0)]
    return {"changes": len(first), "starred_run1": len(starred), "kept_run2": len(kept),
            "starred_run2": sum(c[test]["star"] for c in second.values())}


def markdown(result):
    m, lines = result["machine"], []
    lines += [f"# Repeat stability ({m['cpu_model']}, {m['cores']} cores, torch {m['torch']})", "",
              f"Two runs from scratch of {len(result['settings']['models'])} tiny models x eager/default x "
              f"two images (`a`, `b`: the same torch {m['torch']} under two names, --backend local; every true "
              f"change is 0, so every star is a false positive), --repeats {result['settings']['repeats']}, "
              f"{result['settings']['iterations']} iterations. Load average "
              + "; ".join(f"{name}: {run['loadavg_before'][0]:.1f} -> {run['loadavg_after'][0]:.1f} "
                          f"({run['wall_s']:.0f} s)" for name, run in result["runs"].items())
              + ". The machine was shared with other helpers' work (loaded).", "",
              "| test | image changes | starred in run 1 | of those, same sign and star in run 2 | starred in run 2 |",
              "| --- | --- | --- | --- | --- |"]
    for test, label in (("within_process", "within one process (repeat 0's samples)"),
                        ("hierarchical", "hierarchical (3 processes, then samples)")):
        s = result["survival"][test]
        lines.append(f"| {label} | {s['changes']} | {s['starred_run1']} | {s['kept_run2']} | {s['starred_run2']} |")
    lines += ["", "| cell | run | within-process change % [95% CI] | hierarchical change % [95% CI] |",
              "| --- | --- | --- | --- |"]
    for run, found in result["changes"].items():
        for cell, c in sorted(found.items()):
            w, h = c["within_process"], c["hierarchical"]
            lines.append(f"| {cell} | {run} | {w['change_pct']:+.1f} [{w['low_pct']:+.1f}, {w['high_pct']:+.1f}]"
                         f"{' *' if w['star'] else ''} | {h['change_pct']:+.1f} [{h['low_pct']:+.1f}, "
                         f"{h['high_pct']:+.1f}]{' *' if h['star'] else ''} |")
    return "\n".join(lines) + "\n"


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=lambda s: s.split(","), default=["vit", "resnet"])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    folder = Path(tempfile.mkdtemp(prefix="repeat-stability-"))
    matrix = matrix_file(folder, args)
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    runs = {name: run_once(name, folder, matrix, env) for name in ("run1", "run2")}
    found = {name: changes(run.pop("records")) for name, run in runs.items()}
    environment = read_record(next((folder / "results" / "run1" / "a").glob("*_eager_*.json")))["environment"]
    result = {"settings": {k: v for k, v in vars(args).items() if k != "out"},
              "machine": {"cpu_model": environment["cpu_model"], "cores": os.cpu_count(),
                          "torch": environment["torch"], "python": environment["python"],
                          "platform": platform.platform()},
              "runs": runs, "changes": found,
              "survival": {test: survival(found["run1"], found["run2"], test)
                           for test in ("within_process", "hierarchical")}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "repeat_stability.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    (args.out / "repeat_stability.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
