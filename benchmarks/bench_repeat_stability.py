"""Do starred image-to-image changes survive a rerun? Repeats (the test over processes) vs one process.

Runs a small CPU matrix twice from scratch (two run folders, two empty compile caches) with
``--repeats 3`` through ``matrixbench run --device cpu``: tiny models, eager and default, two
images. Per run it counts the starred changes (the second image against the first, per model and
mode) under

- the test over processes (``matrixbench.report.stats.judge``: Welch's t on the 3 processes'
  log means) -- what the report does now (issue 21; results committed before it were measured
  with the hierarchical bootstrap it replaced, under the key ``hierarchical``);
- the within-process test (the same t test over repeat 0's samples, as if each sample were a
  process: one process per cell) -- what a report without repeats would have to do;

and how many of run 1's stars keep their sign and star in run 2.

Backends (``--backend``, default ``auto``):

- ``venv``: the CPU smoke matrix's two images (matrix-cpu-smoke.yaml: ``stable`` = torch 2.0.1
  on Python 3.10, ``latest`` = torch 2.13 on Python 3.12), each in its own virtual environment
  (``matrixbench build --backend venv``; reused from ~/.cache/matrixbench/venvs when built).
  Two real torch versions: the true changes are not zero and not known, so a star is not a false
  positive by itself; the figure is how often a starred change is starred again, with the same
  sign, by a second run from scratch (a verdict that reproduces).
- ``local``: this interpreter's torch under two names (``a`` and ``b``): every true change is
  zero, and every star is a false positive.
- ``auto``: ``venv`` when both images' venvs are built or their Pythons are found, else ``local``.

    python benchmarks/bench_repeat_stability.py [--backend auto|venv|local] [--models vit,resnet]
        [--iterations 20] [--repeats 3] [--out benchmarks/results]

Writes <out>/repeat_stability.json and .md with the machine (lscpu) and its load average.
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

from benchmarks.machine import contention, describe, describe_contention, lscpu  # noqa: E402
from matrixbench.report import stats  # noqa: E402
from runner.schema import read_record  # noqa: E402

SMOKE_MATRIX = ROOT / "matrix-cpu-smoke.yaml"
VENV_IMAGES = ("stable", "latest")      # baseline, candidate: the smoke matrix's two images


def local_images():
    """This interpreter's torch under two names (``a``, ``b``): every true change is 0."""
    import torch

    version = torch.__version__.split("+")[0]
    image = {"torch": f"torch=={version}", "python": f"{sys.version_info.major}.{sys.version_info.minor}",
             "transformers": "transformers", "description": "the interpreter's own torch (--backend local)"}
    return {"a": dict(image), "b": dict(image)}


def venv_images():
    """The smoke matrix's two image entries, verbatim (so their content hashes, and venvs, are the same)."""
    entries = yaml.safe_load(SMOKE_MATRIX.read_text())["images"]
    return {name: entries[name] for name in VENV_IMAGES}


def venvs_can_be_made():
    """Why the venv backend cannot run here, or None when both images' venvs are built or their Pythons found."""
    from matrixbench.build.interpreters import find_interpreter
    from matrixbench.build.venvs import plan_venv, read_marker
    from matrixbench.errors import MatrixbenchError
    from matrixbench.matrix import load_matrix

    for name in VENV_IMAGES:
        image = load_matrix(SMOKE_MATRIX).images[name]
        if read_marker(plan_venv(image)) is None:
            try:
                find_interpreter(image.python)
            except MatrixbenchError as error:
                return f"image {name!r}: no venv built and {error}"
    return None


def choose_backend(asked):
    if asked != "auto":
        return asked
    reason = venvs_can_be_made()
    if reason:
        print(f"--backend auto: local (the venvs cannot be made: {reason})", file=sys.stderr)
        return "local"
    return "venv"


def matrix_file(folder, args):
    images = venv_images() if args.backend == "venv" else local_images()
    data = {"images": images, "weights": "random", "size": "tiny",
            "models": {name: MODELS[name] for name in args.models}, "batch_sizes": [1],
            "modes": ["eager", "default"], "dtypes": ["float32"], "iterations": args.iterations,
            "warmup": args.warmup, "repeats": args.repeats, "timeout_s": 600}
    path = Path(folder) / "matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, list(images)


MODELS = {"vit": {"id": "google/vit-base-patch16-224", "task": "image-classification"},
          "resnet": {"id": "microsoft/resnet-50", "task": "image-classification"},
          "segformer": {"id": "nvidia/segformer-b0-finetuned-ade-512-512", "task": "image-segmentation"}}


def run_once(name, folder, matrix, env, backend):
    argv = [sys.executable, "-c", "from matrixbench.cli import main; main()", "run",
            "--matrix", str(matrix), "--run", name,
            "--results", str(folder / "results"), "--backend", backend, "--device", "cpu",
            "--cache-dir", str(folder / f"cache-{name}")]
    started, load, pressure = time.monotonic(), os.getloadavg(), contention()
    done = subprocess.run(argv, env=env, cwd=folder, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"run {name} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return {"wall_s": round(time.monotonic() - started, 1), "loadavg_before": load,
            "loadavg_after": os.getloadavg(), "contention_before": pressure, "contention_after": contention(),
            "records": _processes(folder / "results" / name)}


def _processes(run_path):
    """{"image|cell_id": {repeat: samples}} of the ok records."""
    found = {}
    for path in sorted(run_path.glob("*/*.json")):
        if path.name == "cells.json":
            continue
        record = read_record(path)
        if record["status"] == "ok":
            key = f"{record['environment']['image_name']}|{record['cell_id']}"
            found.setdefault(key, {})[record.get("repeat", 0)] = record["timing"]["samples_ms"]
    return found


def changes(records, images):
    """Per cell id: the second image against the first under both tests (change %, significant)."""
    first, second = images
    out = {}
    for key, processes in records.items():
        image, cell = key.split("|")
        baseline = records.get(f"{first}|{cell}")
        if image != second or not baseline:
            continue
        across = stats.judge([mean(processes_) for processes_ in _in_order(baseline)],
                             [mean(processes_) for processes_ in _in_order(processes)], margin_pct=MARGIN_PCT)
        within = stats.judge(baseline[0], processes[0], margin_pct=MARGIN_PCT)
        out[cell] = {"processes": _found(across), "within_process": _found(within)}
    return out


MARGIN_PCT = 2.0


def _in_order(processes):
    return [processes[k] for k in sorted(processes)]


def mean(values):
    return sum(values) / len(values)


def _found(judgement):
    def pct(value):
        return None if value is None else 100 * (value - 1)
    return {"change_pct": pct(judgement.ratio), "low_pct": pct(judgement.low), "high_pct": pct(judgement.high),
            "star": judgement.starred}


def survival(first, second, test):
    starred = [cell for cell, c in first.items() if c[test]["star"]]
    kept = [cell for cell in starred if cell in second and second[cell][test]["star"]
            and (second[cell][test]["change_pct"] > 0) == (first[cell][test]["change_pct"] > 0)]
    return {"changes": len(first), "starred_run1": len(starred), "kept_run2": len(kept),
            "starred_run2": sum(c[test]["star"] for c in second.values())}


MEANING = {
    "local": "the same torch under two names (--backend local): every true change is 0, so every star is a "
             "false positive, and a star that keeps its sign and star in run 2 is a false positive that "
             "\"reproduces\"",
    "venv": "two real torch versions, each in its own venv (--backend venv): the true changes are not 0 and "
            "not known, so a star is not wrong by itself. The figure is how often a starred change is "
            "starred again with the same sign by a second run from scratch (a verdict that reproduces), "
            "and how many changes each test stars at all. Under a real change both tests may star; "
            "the within-process test's interval is narrower because it ignores the process-to-process "
            "spread, so it also stars changes a rerun reverses",
}


def markdown(result):
    m, settings, lines = result["machine"], result["settings"], []
    images = " -> ".join(f"`{name}` (torch {torch}, Python {python})"
                         for name, (torch, python) in result["images"].items())
    lines += [f"# Repeat stability ({m['cpu_model']}, {m['cores']} cores, backend {settings['backend']})", "",
              f"Two runs from scratch of {len(settings['models'])} tiny models "
              f"({', '.join(settings['models'])}) x eager/default x two images: {images}; "
              f"{MEANING[settings['backend']]}. --repeats {settings['repeats']}, "
              f"{settings['iterations']} iterations, {settings['warmup']} warm-up.", "",
              describe(m.get("lscpu", {})), "",
              "Load average (1 min) before -> after each run: "
              + "; ".join(f"{name}: {run['loadavg_before'][0]:.2f} -> {run['loadavg_after'][0]:.2f} "
                          f"({run['wall_s']:.0f} s)" for name, run in result["runs"].items())
              + ". The machine has 2 cores shared with other work; see the JSON for all three load figures.", "",
              "CPU contention before -> after each run: "
              + "; ".join(f"{name}: {describe_contention(run.get('contention_before', {}))} -> "
                          f"{describe_contention(run.get('contention_after', {}))}"
                          for name, run in result["runs"].items()) + ".", "",
              "| test | image changes | starred in run 1 | of those, same sign and star in run 2 | starred in run 2 |",
              "| --- | --- | --- | --- | --- |"]
    for test, label in (("within_process", "within one process (repeat 0's samples)"),
                        ("processes", f"over processes ({settings['repeats']} process means, Welch's t)")):
        s = result["survival"][test]
        lines.append(f"| {label} | {s['changes']} | {s['starred_run1']} | {s['kept_run2']} | {s['starred_run2']} |")
    lines += ["", "| cell | run | within-process change % [95% CI] | over processes change % [95% CI] |",
              "| --- | --- | --- | --- |"]
    for run, found in result["changes"].items():
        for cell, c in sorted(found.items()):
            w, h = c["within_process"], c["processes"]
            lines.append(f"| {cell} | {run} | {w['change_pct']:+.1f} [{w['low_pct']:+.1f}, {w['high_pct']:+.1f}]"
                         f"{' *' if w['star'] else ''} | {h['change_pct']:+.1f} [{h['low_pct']:+.1f}, "
                         f"{h['high_pct']:+.1f}]{' *' if h['star'] else ''} |")
    return "\n".join(lines) + "\n"


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("auto", "venv", "local"), default="auto",
                        help="venv: torch 2.0.1 vs 2.13 (the smoke matrix's venvs); local: this torch twice; "
                             "auto: venv when its venvs can be made, else local")
    parser.add_argument("--models", type=lambda s: s.split(","), default=["vit", "resnet"])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    return parser.parse_args(argv)


def image_environments(run_path, images):
    """{image: [torch, python]} as the records of run 1 say."""
    out = {}
    for name in images:
        environment = read_record(next((run_path / name).glob("*_eager_*.json")))["environment"]
        out[name] = [environment["torch"], environment["python"]]
    return out


def main(argv=None):
    args = parse(argv)
    args.backend = choose_backend(args.backend)
    folder = Path(tempfile.mkdtemp(prefix="repeat-stability-"))
    matrix, images = matrix_file(folder, args)
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    runs = {}
    for name in ("run1", "run2"):
        runs[name] = run_once(name, folder, matrix, env, args.backend)
        print(f"{name}: {runs[name]['wall_s']:.0f} s, load {runs[name]['loadavg_before'][0]:.2f} -> "
              f"{runs[name]['loadavg_after'][0]:.2f}", file=sys.stderr, flush=True)
    found = {name: changes(run.pop("records"), images) for name, run in runs.items()}
    environment = read_record(next((folder / "results" / "run1" / images[0]).glob("*_eager_*.json")))["environment"]
    result = {"settings": {k: v for k, v in vars(args).items() if k != "out"},
              "machine": {"cpu_model": environment["cpu_model"], "cores": os.cpu_count(), "lscpu": lscpu(),
                          "platform": platform.platform()},
              "images": image_environments(folder / "results" / "run1", images),
              "runs": runs, "changes": found,
              "survival": {test: survival(found["run1"], found["run2"], test)
                           for test in ("within_process", "processes")}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "repeat_stability.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    (args.out / "repeat_stability.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
