"""A hand-made record set whose every derived number is known in advance, checked number by number.

The records are built here with the runner's record builder, independently of the report code;
the expected values are worked out by hand from the latencies below and the numbers typed from
the seed page (matrixbench/data/perf_torch_compile.md), never computed by the report's functions.

Three images on a T4: ``old`` (torch 2.0.1: the page's main tables), ``new`` (torch 2.1.0: its
nightly and reduce-overhead tables) and ``custom`` (torch 2.5.0, which matches no source, with
``published: main`` set in the run's matrix).
"""
import json
import re

import pandas as pd
import pytest

from host_helpers import synthetic_record
from matrixbench.report import build_report
from runner import records
from runner.cells_file import cells_file_from_dict
from runner.core import Status
from runner.timing import summarize
from unrendered_charts import drawn_not_rendered

GPU = "Tesla T4"
TORCH = {"old": "2.0.1+cu118", "new": "2.1.0+cu118", "custom": "2.5.0+cu124"}
TASKS = {"vit": "image-classification", "beit": "image-classification", "resnet": "image-classification",
         "detr": "object-detection"}
# (image, model, batch size, mode) -> mean ms, or a failure status
CELLS = {
    ("old", "vit", 1, "eager"): 20.0, ("old", "vit", 1, "default"): 16.0,
    ("old", "detr", 1, "eager"): 80.0, ("old", "detr", 1, "default"): 50.0,        # accuracy fails
    ("old", "resnet", 1, "eager"): "oom", ("old", "resnet", 1, "default"): 4.0,     # eager failed
    ("new", "vit", 1, "eager"): 20.0, ("new", "vit", 1, "default"): 12.5, ("new", "vit", 1, "reduce-overhead"): 8.0,
    ("new", "detr", 1, "eager"): 70.0, ("new", "detr", 1, "default"): 50.0,
    ("new", "beit", 16, "eager"): 40.0, ("new", "beit", 16, "default"): 40.0,
    ("new", "resnet", 1, "eager"): 10.0, ("new", "resnet", 1, "reduce-overhead"): 5.0,
    ("custom", "vit", 1, "eager"): 20.0, ("custom", "vit", 1, "default"): 10.0,
}
ACCURACY_FAILED = {("old", "detr", 1, "default")}


def _write_run(run_dir):
    manifest = {"schema_version": 1, "images": ["old", "new", "custom"], "note": "hand-made known answers",
                "matrix": {"images": {"custom": {"torch": "torch==2.5.0", "published": "main"}}}}
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps(manifest))
    for key, value in CELLS.items():
        for repeat in (0, 1):          # two processes per cell, so that changes are tested
            record = {**_record(key, value).to_dict(), "repeat": repeat}
            (run_dir / key[0]).mkdir(exist_ok=True)
            (run_dir / key[0] / f"{record['cell_id']}.r{repeat}.json").write_text(json.dumps(record))


def _record(key, value):
    image, model, batch, mode = key
    cell = {"model": model, "task": TASKS[model], "weights": "random", "size": "full", "batch_size": batch,
            "mode": mode, "fullgraph": False, "dtype": "float32"}
    plan = cells_file_from_dict({"settings": {"iterations": 20}, "cells": [cell]})
    environment = {"python": "3.10.14", "torch": TORCH[image], "torch_git": None, "transformers": "4.43.4",
                   "cuda": "11.8", "cudnn": 8700, "gpu_name": GPU, "gpu_count": 1, "driver": "hand-made",
                   "cpu_model": "hand-made", "threads": 1, "platform": "hand-made", "hostname": "hand-made",
                   "image_name": image, "image_id": None}
    record = synthetic_record(plan, "cuda", environment)
    record.duration_s = 1.0
    if value == "oom":
        return records.fail(record, Status.OOM, "OutOfMemoryError", "CUDA out of memory (hand-made)")
    samples = [value * 0.99, value * 1.01] * 10          # mean exactly `value`, spread 1%
    record.status, record.memory = Status.OK, {"peak_bytes": 1, "kind": "cuda_max_allocated"}
    record.timing = {"load_s": 1.0, "first_call_s": 1.0, "warmup_s": 1.0, "timer": "cuda_event",
                     **summarize(samples, 0.1)}
    if mode == "eager":
        record.accuracy = {"max_abs_diff": None, "tolerance": None, "status": "skipped"}
    else:
        failed = key in ACCURACY_FAILED
        record.accuracy = {"max_abs_diff": 0.5 if failed else 0.0, "tolerance": 0.01,
                           "status": "fail" if failed else "pass"}
        record.dynamo = {"graphs": 1, "graph_breaks": 0, "recompiles": 0, "cudagraph_skips": 0,
                         "break_reasons": []}
    return record


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("known")
    _write_run(root / "run")
    with drawn_not_rendered():   # checks no chart (tests/unrendered_charts.py)
        build_report([root / "run"], root / "out", ["md", "csv"])
    return pd.read_csv(root / "out" / "comparisons.csv"), (root / "out" / "report.md").read_text(encoding="utf-8")


def _one(frame, **where):
    selected = frame
    for column, value in where.items():
        selected = selected[selected[column] == value]
    assert len(selected) == 1, where
    return selected.iloc[0]


@pytest.mark.parametrize("image, model, batch, mode, ratio", [
    ("old", "vit", 1, "default", 20 / 16), ("old", "detr", 1, "default", 80 / 50),
    ("new", "vit", 1, "default", 20 / 12.5), ("new", "vit", 1, "reduce-overhead", 20 / 8),
    ("new", "detr", 1, "default", 70 / 50), ("new", "beit", 16, "default", 1.0),
    ("new", "resnet", 1, "reduce-overhead", 2.0), ("custom", "vit", 1, "default", 2.0),
])
def test_speedups(built, image, model, batch, mode, ratio):
    row = _one(built[0], kind="speedup", image=image, model=model, batch_size=batch, mode=mode)
    assert row["estimate_ratio"] == pytest.approx(ratio)
    assert row["percent"] == pytest.approx((ratio - 1) * 100)
    # both processes of a cell are identical here: the interval is the point, the verdict certain
    assert row["ratio_low"] == pytest.approx(ratio) and row["ratio_high"] == pytest.approx(ratio)
    assert row["verdict"] == ("no change" if ratio == 1.0 else "faster")
    assert row["baseline_processes"] == row["candidate_processes"] == 2 and row["margin_pct"] == 3.0


def test_no_speedup_where_eager_failed(built):
    assert built[0].query("kind == 'speedup' and image == 'old' and model == 'resnet'").empty


@pytest.mark.parametrize("before, after, model, mode, percent, verdict", [
    ("old", "new", "vit", "eager", 0.0, "no change"), ("old", "new", "vit", "default", -21.875, "faster"),
    ("old", "new", "detr", "eager", -12.5, "faster"), ("old", "new", "detr", "default", 0.0, "no change"),
    ("new", "custom", "vit", "default", -20.0, "faster"), ("new", "custom", "vit", "eager", 0.0, "no change"),
])
def test_image_changes(built, before, after, model, mode, percent, verdict):
    row = _one(built[0], kind="image_change", image=after, against=before, model=model, mode=mode)
    assert row["percent"] == pytest.approx(percent, abs=1e-9)
    assert row["verdict"] == verdict and row["baseline_processes"] == row["candidate_processes"] == 2
    assert row["low_pct"] == pytest.approx(percent, abs=1e-9) == row["high_pct"]
    assert row["detectable_pct"] == pytest.approx(0.0, abs=1e-9)


def test_mode_change(built):
    row = _one(built[0], kind="mode_change", image="new", model="vit", mode="reduce-overhead")
    assert row["percent"] == pytest.approx(-36.0) and row["verdict"] == "faster"


# Published T4 values typed from the page: main (torch 2.0), nightly, reduce-overhead.
@pytest.mark.parametrize("image, model, batch, mode, table, published, measured, noted", [
    ("old", "vit", 1, "eager", "main", 16.520, 20.0, False),
    ("old", "vit", 1, "default", "main", 15.786, 16.0, False),
    ("old", "detr", 1, "eager", "main", 73.100, 80.0, False),
    ("old", "detr", 1, "default", "main", 53.99, 50.0, True),                   # two decimals on the page
    ("new", "detr", 1, "eager", "nightly", 68.382, 70.0, False),
    ("new", "detr", 1, "default", "nightly", 53.481, 50.0, False),
    ("new", "beit", 16, "eager", "nightly", 42.179, 40.0, True),                 # the copy error
    ("new", "beit", 16, "default", "nightly", 42.147, 40.0, True),
    ("new", "resnet", 1, "eager", "reduce-overhead", 9.761, 10.0, False),
    ("new", "resnet", 1, "reduce-overhead", "reduce-overhead", 7.698, 5.0, False),
    ("custom", "vit", 1, "default", "main", 15.786, 10.0, False),               # by the matrix's override
])
def test_deviations_against_each_source(built, image, model, batch, mode, table, published, measured, noted):
    row = _one(built[0], kind="published_deviation", image=image, model=model, batch_size=batch, mode=mode)
    assert (row["published_table"], row["published_gpu"]) == (table, "T4")
    assert row["baseline_ms"] == pytest.approx(published) and row["candidate_ms"] == pytest.approx(measured)
    assert row["percent"] == pytest.approx((measured / published - 1) * 100)
    assert bool(isinstance(row["published_note"], str) and row["published_note"]) is noted


def test_no_deviation_where_the_source_publishes_nothing(built):
    found = built[0].query("kind == 'published_deviation'")
    assert not ((found["image"] == "new") & (found["model"] == "vit")).any()   # vit is in no 2.1 table
    assert set(found["published_source"]) == {"main", "nightly"}


def _summary_cell(markdown, image, mode, column):
    lines = [line for line in markdown.splitlines() if line.startswith("| Tesla T4 | " + image)]
    header = next(line for line in markdown.splitlines() if line.startswith("| Device | Image | Mode"))
    names = [name.strip() for name in header.strip("|").split("|")]
    row = next(line for line in lines if f"| {mode} |" in line)
    return [cell.strip() for cell in row.strip("|").split("|")][names.index(column)]


@pytest.mark.parametrize("image, mode, own, common", [
    ("old (torch 2.0.1)", "default", "1.25× (1 cell)", "1.25× (1 cell)"),   # detr fails accuracy, resnet has no eager
    ("new (torch 2.1.0)", "default", f"{(1.6 * 1.4 * 1.0) ** (1 / 3):.2f}× (3 cells)", "1.60× (1 cell)"),
    ("custom (torch 2.5.0)", "default", "2.00× (1 cell)", "2.00× (1 cell)"),
])
def test_geomeans_exclude_accuracy_failures_and_give_the_common_cells(built, image, mode, own, common):
    assert _summary_cell(built[1], image, mode, "geo-mean speed-up") == own
    assert _summary_cell(built[1], image, mode, "geo-mean over common cells") == common


def test_failure_footnotes_and_marks(built):
    markdown = built[1]
    oom = re.search(r"\[\^(\d+)\]: OOM \(old \(torch 2\.0\.1\), Tesla T4, batch size 1, "
                    r"Image Classification/ResNet, eager\): OutOfMemoryError: CUDA out of memory", markdown)
    assert oom
    assert f"| Image Classification/ResNet | OOM[^{oom.group(1)}] | 4.000◊ |" in markdown
    copy_error = re.search(r"\[\^(\d+)\]: Published value \(nightly tables .*T4, batch size 16, "
                           r"Image Classification/BeiT, eager\): repeats the A100", markdown)
    assert copy_error and f"42.179§[^{copy_error.group(1)}]" in markdown
    assert re.search(r"53\.990§\[\^\d+\]", markdown)
