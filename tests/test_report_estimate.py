"""A cell's one central latency (stats.cell_estimate): the geometric mean of its processes' mean ms.

Every number the report shows or combines for a cell (tables, comparisons.csv, costs) is that
estimate, and every judged ratio is a ratio of those estimates, so ms and % never disagree (but for a change
paired by round that left out rounds only one side ran: its ratio is the one on the shared rounds). The
simulation: a noisy multi-process CPU run (heavy-tailed samples, processes with very different
sample counts, as an adaptive run gives), where the mean over all samples and the geometric mean
of the process means part ways, often enough to flip a speed-up's sign.
"""
import csv
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

MODES = ("eager", "default", "reduce-overhead")
IMAGES = {"old": "2.0.1", "new": "2.1.0"}
MODELS = ("vit", "resnet", "beit", "convnext", "deit", "swin")


def _record(image, model, mode, repeat, samples):
    cell = {"model": model, "task": "image-classification", "weights": "random", "size": "full",
            "batch_size": 1, "mode": mode, "fullgraph": False, "dtype": "float32"}
    # settings.iterations is what the run asked for, the same in every process (the report keeps processes of other
    # settings apart); the sample count (timing.n) is what each process's loop made of it
    plan = cells_file_from_dict({"settings": {"iterations": 20, "cv_threshold": 0.2}, "cells": [cell]})
    environment = {"python": "3.10", "torch": IMAGES[image], "torch_git": None, "transformers": "4.43.4",
                   "cuda": None, "cudnn": None, "gpu_name": None, "gpu_count": 0, "driver": None,
                   "cpu_model": "simulated", "threads": 2, "platform": "simulated", "hostname": "simulated",
                   "image_name": image, "image_id": None}
    record = synthetic_record(plan, "cpu", environment)
    record.status, record.duration_s = Status.OK, 10.0
    record.memory = {"peak_bytes": 1, "kind": "cpu_max_rss"}
    record.accuracy = {"max_abs_diff": 0.0, "tolerance": 1e-3, "status": "pass"}
    record.timing = {"load_s": 1.0, "first_call_s": 5.0 if mode != "eager" else 0.1, "warmup_s": 1.0,
                     "timer": "perf_counter", **summarize([float(value) for value in samples], 0.2)}
    return {**record.to_dict(), "repeat": repeat}


def _write_run(root, cells):
    """A run folder of ``cells``: {(image, model, mode): [each process's samples]}."""
    run = root / "run"
    for image in IMAGES:
        (run / image).mkdir(parents=True, exist_ok=True)
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "images": list(IMAGES)}))
    for (image, model, mode), processes in cells.items():
        for repeat, samples in enumerate(processes):
            path = run / image / f"{model}_bs1_{mode}_float32.r{repeat}.json"
            path.write_text(json.dumps(_record(image, model, mode, repeat, samples)))
    return run


def _build(root, cells):
    out = root / "out"
    with drawn_not_rendered():   # checks no chart (tests/unrendered_charts.py)
        build_report([_write_run(root, cells)], out, ["md", "csv"])
    with open(out / "costs.csv", newline="", encoding="utf-8") as handle:
        costs = list(csv.DictReader(handle))
    return pd.read_csv(out / "comparisons.csv"), (out / "report.md").read_text(encoding="utf-8"), costs


def test_cell_estimate_is_the_geometric_mean_of_the_process_means():
    assert stats.cell_estimate([10.0, 40.0]) == pytest.approx(20.0)
    assert stats.cell_estimate([7.25]) == 7.25             # one process: its mean, exactly
    with pytest.raises(ValueError):
        stats.cell_estimate([10.0, 0.0])


def test_a_cell_of_processes_10_and_40_ms_shows_20_ms_not_25(tmp_path):
    # equal sample counts: the mean over all samples is 25 ms, the geometric mean of the process means 20
    cells = {(image, "vit", mode): [[10.0] * 20, [40.0] * 20] for image in IMAGES for mode in MODES[:2]}
    frame, markdown, costs = _build(tmp_path, cells)
    cell = frame.query("kind == 'cell' and image == 'old' and mode == 'eager'").iloc[0]
    assert cell["candidate_ms"] == pytest.approx(20.0)
    assert "| Image Classification/ViT | 20.000¶ | 20.000 (+0.0%?)¶ |" in markdown
    assert "25.000" not in markdown
    assert [float(line["mean_latency_ms"]) for line in costs] == pytest.approx([20.0] * 4)


def _noisy_run(rng):
    """Cells of 2-4 processes each: a true latency per cell, a process offset of ±40% (log sd 0.35),
    samples log-normal with sd 0.8 around it and 3 to 400 samples a process."""
    cells = {}
    for image in IMAGES:
        for model in MODELS:
            for mode in MODES:
                truth = rng.uniform(5.0, 20.0)
                cells[(image, model, mode)] = [
                    truth * np.exp(rng.normal(0.0, 0.35)) * rng.lognormal(0.0, 0.8, size=int(rng.integers(3, 400)))
                    for _ in range(int(rng.integers(2, 5)))]
    return cells


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    rng = np.random.default_rng(20261124)
    cells = _noisy_run(rng)
    return cells, _build(tmp_path_factory.mktemp("noisy"), cells)


def test_the_simulation_would_flip_signs_under_the_mean_over_all_samples(noisy):
    """The case the estimate exists for is really there: some compiled cell is faster than eager by
    the mean over all samples but slower by the geometric mean of its process means, or the reverse."""
    cells, _ = noisy

    def pooled(key):
        return float(np.mean(np.concatenate(cells[key])))

    def estimate(key):
        return scipy_stats.gmean([float(np.mean(samples)) for samples in cells[key]])

    flips = [key for key in cells if key[2] != "eager"
             if (pooled(key) < pooled(key[:2] + ("eager",))) != (estimate(key) < estimate(key[:2] + ("eager",)))]
    assert flips


def test_comparisons_csv_ms_are_the_geometric_means_and_agree_with_every_ratio(noisy):
    cells, (frame, _, _) = noisy
    for _, row in frame.query("kind == 'cell'").iterrows():
        means = [float(np.mean(samples)) for samples in cells[(row["image"], row["model"], row["mode"])]]
        assert row["candidate_ms"] == pytest.approx(scipy_stats.gmean(means), rel=1e-9)
    speedups = frame.query("kind == 'speedup'")
    changes = frame.query("kind in ('image_change', 'mode_change')")
    assert len(speedups) == 2 * len(MODELS) * 2 and len(changes) == len(MODELS) * 3 + 2 * len(MODELS)
    assert speedups["estimate_ratio"].to_numpy() == pytest.approx(
        (speedups["baseline_ms"] / speedups["candidate_ms"]).to_numpy(), rel=1e-9)
    whole = changes["paired_rounds"].isna() | (changes["baseline_processes"] + changes["candidate_processes"]
                                               == 2 * changes["paired_rounds"])
    assert changes[whole]["estimate_ratio"].to_numpy() == pytest.approx(
        (changes[whole]["candidate_ms"] / changes[whole]["baseline_ms"]).to_numpy(), rel=1e-9)
    # paired on the rounds both sides ran (cells of 2-4 processes, rounds 0 .. n - 1): the ratio of the
    # geometric means of those rounds' process means
    assert (~whole).any()
    for _, row in changes[~whole].iterrows():
        baseline = (row["image"], row["model"], row["against"]) if row["kind"] == "mode_change" else \
            ("old", row["model"], row["mode"])
        rounds = int(row["paired_rounds"])
        means = [[float(np.mean(samples)) for samples in cells[key][:rounds]]
                 for key in (baseline, (row["image"], row["model"], row["mode"]))]
        assert row["estimate_ratio"] == pytest.approx(scipy_stats.gmean(means[1]) / scipy_stats.gmean(means[0]),
                                                      rel=1e-9)
    for part in (speedups, changes):
        assert (np.sign(part["percent"]) == np.sign(part["estimate_ratio"] - 1)).all()


NUMBER = r"(\d+\.\d{3})\S*"
PERCENT = r"([+-]\d+\.\d)%"


def _section(markdown, title):
    start = markdown.index(f"\n## {title}")
    return markdown[start:markdown.index("\n## ", start + 1)]


def _rows(section):
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith(("| Task/Model", "| :"))]


def test_latency_tables_show_a_speed_up_that_follows_from_their_ms(noisy):
    """Per device: eager ms / compiled ms - 1 is the % in brackets (up to the 3-decimal rounding of ms)."""
    checked = 0
    for row in _rows(_section(noisy[1][1], "Latency per device and batch size")):
        eager = float(re.match(NUMBER, row[1]).group(1))
        for text in row[2:]:
            compiled, shown = re.match(NUMBER + r" \(" + PERCENT, text).groups()
            assert (eager / float(compiled) - 1) * 100 == pytest.approx(float(shown), abs=0.1)
            checked += 1
    assert checked == len(IMAGES) * len(MODELS) * 2


def test_image_and_mode_tables_show_a_change_that_follows_from_their_ms(noisy):
    """The % beside the ms is their ratio, but where a change paired by round left out rounds only one side ran:
    then the table says on how many rounds it was judged (its % is the ratio on those) and comparisons.csv agrees."""
    frame, markdown, _ = noisy[1]
    left_out = frame.query("kind in ('image_change', 'mode_change') and paired_rounds.notna() and "
                           "baseline_processes + candidate_processes > 2 * paired_rounds")
    shown_left_out = 0
    pairs = _rows(_section(markdown, "Image against image"))
    for row in pairs:
        if "only one side ran" in row[7]:
            shown_left_out += 1
            continue
        before, after = (float(re.match(NUMBER, text).group(1)) for text in row[2:4])
        assert (after / before - 1) * 100 == pytest.approx(float(re.match(PERCENT, row[4]).group(1)), abs=0.1)
    modes = _rows(_section(markdown, "Compile modes against default"))
    for row in modes:
        default = float(re.match(NUMBER, row[2]).group(1))
        compiled, shown = re.match(NUMBER + r" \(" + PERCENT, row[3]).groups()
        if re.search(r", \d+ of \d+ rounds\)", row[3]):
            shown_left_out += 1
            continue
        assert (float(compiled) / default - 1) * 100 == pytest.approx(float(shown), abs=0.1)
    assert len(pairs) == len(MODELS) * len(MODES) and len(modes) == len(IMAGES) * len(MODELS)
    assert shown_left_out == len(left_out) > 0
    mode_changes = frame.query("kind == 'mode_change' and pairing.notna()")
    paired = mode_changes.query("pairing == 'paired by round'")
    partial = left_out.query("kind == 'mode_change'")
    assert (f"Here {len(paired)} of {len(mode_changes)} tested mode changes were paired by round, {len(partial)} of "
            "them leaving out rounds only one side ran.") in markdown


def test_break_even_is_never_exactly_where_the_compiled_cell_is_not_faster(noisy):
    """Break-even (from the ms) and the speed-up (judged from the process means) agree on "faster"."""
    frame, _, costs = noisy[1]
    speedups = {(row["image"], row["model"], row["mode"]): row["estimate_ratio"]
                for _, row in frame.query("kind == 'speedup'").iterrows()}
    compiled = [line for line in costs if line["mode"] != "eager"]
    assert len(compiled) == len(speedups) == len(IMAGES) * len(MODELS) * 2
    for line in compiled:
        faster = speedups[(line["image"], line["model"], line["mode"])] > 1.0
        assert (line["break_even_cold_calls"] not in ("", "inf")) == faster, line   # never: inf (docs/cost.md)
