"""Cells measured in several processes (records with a `repeat` index): statistics across them.

Hand-made records: vit's processes have tight samples but per-process means that overlap
between the two images (no star unpaired; paired by round, as the report judges two images' cells
of one run, each round moved both sides alike: a star); resnet's are cleanly separated (a star); beit ran
once per image (the change is shown, "not tested: one process per cell"). The records' own
cv_threshold (0.2) is above vit's between-process CV (0.167): the ¶ flag follows the report's
between_cv_threshold (0.05), not the runner's within-process one.
"""
import json
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from host_helpers import synthetic_record
from matrixbench.report import build_report, stats
from runner.cells_file import cells_file_from_dict
from runner.core import Status
from runner.timing import summarize
from unrendered_charts import drawn_not_rendered

# (image, model) -> the mean of each process; samples spread 0.5% around it
PROCESS_MEANS = {
    ("old", "vit"): [10.0, 12.0, 14.0], ("new", "vit"): [11.0, 13.0, 15.0],       # overlapping
    ("old", "resnet"): [10.0, 10.1, 9.9], ("new", "resnet"): [12.0, 12.1, 11.9],  # cleanly separated
    ("old", "beit"): [10.0], ("new", "beit"): [12.0],                             # one process each
}
TORCH = {"old": "2.0.1", "new": "2.1.0"}


def _record(image, model, repeat, mean):
    cell = {"model": model, "task": "image-classification", "weights": "random", "size": "full",
            "batch_size": 1, "mode": "eager", "fullgraph": False, "dtype": "float32"}
    plan = cells_file_from_dict({"settings": {"iterations": 100, "cv_threshold": 0.2}, "cells": [cell]})
    environment = {"python": "3.10", "torch": TORCH[image], "torch_git": None, "transformers": "4.43.4",
                   "cuda": None, "cudnn": None, "gpu_name": None, "gpu_count": 0, "driver": None,
                   "cpu_model": "hand-made", "threads": 1, "platform": "hand-made", "hostname": "hand-made",
                   "image_name": image, "image_id": None}
    record = synthetic_record(plan, "cpu", environment)
    noise = np.random.default_rng(repeat + 7 * len(model)).standard_normal(100)
    samples = [float(value) for value in mean * (1 + 0.005 * (noise - noise.mean()) / noise.std(ddof=1))]
    record.status, record.duration_s = Status.OK, 1.0
    record.memory = {"peak_bytes": 1, "kind": "cpu_max_rss"}
    record.accuracy = {"max_abs_diff": None, "tolerance": None, "status": "skipped"}
    record.timing = {"load_s": 1.0, "first_call_s": 1.0, "warmup_s": 1.0, "timer": "perf_counter",
                     **summarize(samples, 0.2)}
    data = {**record.to_dict(), "repeat": repeat}
    if repeat == 0 and image == "new" and model == "beit":
        del data["repeat"]          # a record without the index is repeat 0
    return data


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("repeats")
    run = root / "run"
    (run / "old").mkdir(parents=True)
    (run / "new").mkdir()
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "images": ["old", "new"]}))
    for (image, model), means in PROCESS_MEANS.items():
        for repeat, mean in enumerate(means):
            path = run / image / f"{model}_bs1_eager_float32.r{repeat}.json"
            path.write_text(json.dumps(_record(image, model, repeat, mean)))
    with drawn_not_rendered():   # checks no chart (tests/unrendered_charts.py)
        build_report([run], root / "out", ["md", "csv"])
    return (pd.read_csv(root / "out" / "comparisons.csv"), (root / "out" / "report.md").read_text(encoding="utf-8"),
            pd.read_csv(root / "out" / "results.csv"))


def _pair_row(markdown, label):
    return next(line for line in markdown.splitlines() if line.startswith(f"| {label} | eager |"))


def test_every_process_is_a_line_of_results_csv(built):
    assert len(built[2]) == sum(len(means) for means in PROCESS_MEANS.values())
    assert sorted(built[2]["repeat"].unique()) == [0, 1, 2]


def test_each_cell_lists_its_process_means_and_their_cv(built):
    row = built[0].query("kind == 'cell' and image == 'old' and model == 'vit'").iloc[0]
    assert [float(mean) for mean in row["process_means"].split(";")] == pytest.approx([10.0, 12.0, 14.0])
    # the cell's ms: the geometric mean of its process means (stats.cell_estimate), not their mean 12
    assert row["candidate_ms"] == pytest.approx(scipy_stats.gmean([10.0, 12.0, 14.0])) and row["processes"] == 3
    assert row["between_cv"] == pytest.approx(np.std([10.0, 12.0, 14.0], ddof=1) / 12.0)


def _geometric_change_pct(model):
    return (scipy_stats.gmean(PROCESS_MEANS[("new", model)]) / scipy_stats.gmean(PROCESS_MEANS[("old", model)])
            - 1) * 100


def test_overlapping_process_means_get_no_star_unpaired_but_one_paired_by_round(built):
    """vit's process means overlap between the images (10/12/14 against 11/13/15): judged unpaired (Welch)
    the change is undecided. But both images ran in rounds 0-2 of one run, and each round moved both alike
    (+10%, +8.3%, +7.1%), so the report pairs them by round (issue 34) and the change is starred."""
    unpaired = stats.judge(PROCESS_MEANS[("old", "vit")], PROCESS_MEANS[("new", "vit")], margin_pct=3.0)
    assert unpaired.verdict == "undecided" and unpaired.low < 1 < unpaired.high
    row = built[0].query("kind == 'image_change' and model == 'vit'").iloc[0]
    assert row["percent"] == pytest.approx(_geometric_change_pct("vit"), abs=1e-6)     # +8.5% (arithmetic: +8.3%)
    assert row["verdict"] == "slower" and row["baseline_processes"] == row["candidate_processes"] == 3
    assert row["pairing"] == "paired by round" and 0 < row["low_pct"] < row["high_pct"]
    assert re.search(r"\| \+8\.5%\* \| \[\+\d+\.\d%, \+\d+\.\d%\] \| slower \| paired by round \|",
                     _pair_row(built[1], "Image Classification/ViT"))


def test_cleanly_separated_process_means_get_a_star(built):
    row = built[0].query("kind == 'image_change' and model == 'resnet'").iloc[0]
    assert row["percent"] == pytest.approx(_geometric_change_pct("resnet"), abs=1e-6) and row["verdict"] == "slower"
    assert "| +20.0%* |" in _pair_row(built[1], "Image Classification/ResNet")
    assert "| slower |" in _pair_row(built[1], "Image Classification/ResNet")


def test_one_process_per_cell_is_shown_but_not_tested(built):
    row = built[0].query("kind == 'image_change' and model == 'beit'").iloc[0]
    assert row["percent"] == pytest.approx(20.0, abs=0.01)
    assert row["verdict"] == "not tested" and (row["baseline_processes"], row["candidate_processes"]) == (1, 1)
    assert pd.isna(row["low_pct"]) and pd.isna(row["ratio_high"]) and pd.isna(row["detectable_pct"])
    assert _pair_row(built[1], "Image Classification/BeiT").endswith(
        "| +20.0% | not tested: one process per cell | not tested | — |")


def test_between_process_noise_is_flagged_apart_from_within_process_noise(built):
    markdown = built[1]
    assert "11.888¶" in markdown          # vit (geometric mean of 10/12/14): CV 0.167 > 0.05
    assert "10.000¶" not in markdown      # resnet: CV 0.01
    assert "¶ noisy between processes" in markdown and "† noisy within a process" in markdown
    details = markdown.split("### Summary, in detail")[1]   # the summary's detail table has the CV
    summary = next(line for line in details.splitlines() if line.startswith("| CPU (hand-made) | old"))
    between = np.median([np.std(m, ddof=1) / np.mean(m) for m in ([10.0, 12.0, 14.0], [10.0, 10.1, 9.9])])
    assert f"| {between:.3f} |" in summary
