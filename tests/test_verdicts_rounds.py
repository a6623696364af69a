"""Issue 34, item 4: drift and machine states. Image changes paired by round, and the note on a run whose
cells moved together by round.

The simulations plant the truth (tests/hostsim.py ``run_rounds``: the executors' counterbalanced rounds, a
state each round shares, a 5% linear drift, a 5% step mid-run, on a lognormal process level or the host fitted
to the H100 records); the rates are shares of simulated comparisons. The big sweep is
benchmarks/bench_round_pairing.py (results/round_pairing.md); these hold its findings at a few hundred trials.
The report tests build hand-made records of one run (two images, three rounds).
"""
import json
import math
import re

import numpy as np
import pandas as pd
import pytest

import hostsim
from host_helpers import synthetic_record
from matrixbench.report import build_report, stats
from runner.cells_file import cells_file_from_dict
from runner.core import Status
from runner.timing import summarize

STARS = ("faster", "slower")
EVERYTHING = {"state_sd": 0.05, "drift": 0.05, "step": 0.05}


def _both_ways(baseline, candidate):
    paired = stats.judge_by_round_many(np.log(candidate) - np.log(baseline), margin_pct=3.0)
    return paired, stats.judge_many(baseline, candidate, margin_pct=3.0)


def _rates(found):
    return (float(np.mean(np.isin(found.verdict, STARS))), float(np.mean((found.low <= 1.0) & (1.0 <= found.high))),
            float(np.mean(found.verdict == stats.NO_CHANGE)))


def _level(trials):
    return 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials)


def test_abba_slots_are_the_executors_counterbalanced_order():
    a, b = hostsim.abba_slots(3)
    assert list(a * 5) == [0, 3, 4] and list(b * 5) == [1, 2, 5]


@pytest.mark.parametrize("rounds", [3, 5])
@pytest.mark.parametrize("machine", [{}, {"state_sd": 0.05}, {"drift": 0.05}, {"step": 0.05}, EVERYTHING])
def test_pairing_by_round_holds_its_level_under_drift_states_and_a_step(rounds, machine):
    """Lognormal process levels (CV 1%) at no change: paired by round stars at most 5% (within two standard
    errors of 1,000 trials) and its 95% intervals hold the truth at least 93% of the time."""
    rng = np.random.default_rng(40 + rounds)
    paired, _ = _both_ways(*hostsim.run_rounds(rng, 1000, rounds, cv=0.01, **machine))
    stars, coverage, _ = _rates(paired)
    assert stars <= _level(1000) and coverage >= 0.93, (stars, coverage)


@pytest.mark.parametrize("machine", [{"drift": 0.05}, {"state_sd": 0.05}, EVERYTHING])
def test_under_drift_no_change_stays_decided_more_often_paired_than_unpaired(machine):
    """5 rounds, CV 1%: a 5% drift (or a shared round state, or all three) leaves unpaired Welch undecided where
    the pairing still calls "no change" (benchmarks/results/round_pairing.md: 78% against 22% under drift)."""
    rng = np.random.default_rng(44)
    paired, unpaired = _both_ways(*hostsim.run_rounds(rng, 1000, 5, cv=0.01, **machine))
    assert _rates(paired)[2] > _rates(unpaired)[2] + 0.04, (_rates(paired), _rates(unpaired))


@pytest.mark.skipif(not hostsim.EVIDENCE.exists(), reason=f"no H100 evidence at {hostsim.EVIDENCE}")
def test_pairing_by_round_holds_its_level_under_the_fitted_host():
    """The host fitted to the H100 records (a 4 ms launch-bound cell, 300 calls a process), 3 rounds, with a
    shared round state, drift and a step: at no change paired by round stars at most 5% and covers >= 93%."""
    host, _ = hostsim.fit()
    rng = np.random.default_rng(45)
    paired, _ = _both_ways(*hostsim.run_rounds(rng, 400, 3, host=host, **EVERYTHING))
    stars, coverage, _ = _rates(paired)
    assert stars <= _level(400) and coverage >= 0.93, (stars, coverage)


# --- the report -------------------------------------------------------------------------------------------

MODELS = ("vit", "resnet", "beit", "deit")
STEP = 1.05          # round 2 runs 5% slower for every cell of the run
NOISE = {"vit": (0.0, 0.01, -0.01), "resnet": (0.01, -0.005, 0.0), "beit": (-0.01, 0.0, 0.01),
         "deit": (0.005, 0.01, -0.005)}


def _record(image, model, repeat, mean):
    cell = {"model": model, "task": "image-classification", "weights": "random", "size": "full",
            "batch_size": 1, "mode": "eager", "fullgraph": False, "dtype": "float32"}
    plan = cells_file_from_dict({"settings": {"iterations": 40}, "cells": [cell]})
    environment = {"python": "3.10", "torch": {"old": "2.0.1", "new": "2.1.0"}[image], "torch_git": None,
                   "transformers": "4.43.4", "cuda": None, "cudnn": None, "gpu_name": None, "gpu_count": 0,
                   "driver": None, "cpu_model": "hand-made", "threads": 1, "platform": "hand-made",
                   "hostname": "hand-made", "image_name": image, "image_id": None}
    record = synthetic_record(plan, "cpu", environment)
    record.status, record.duration_s = Status.OK, 1.0
    record.memory = {"peak_bytes": 1, "kind": "cpu_max_rss"}
    record.accuracy = {"max_abs_diff": None, "tolerance": None, "status": "skipped"}
    record.timing = {"load_s": 1.0, "first_call_s": 1.0, "warmup_s": 1.0, "timer": "perf_counter",
                     **summarize([mean * 0.998, mean * 1.002] * 20, 0.1)}
    return {**record.to_dict(), "repeat": repeat}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One run, images old and new, 4 models in 3 rounds; round 2 is 5% slower for every cell (a step the
    machine took); new's beit lost its round-1 process (failed: no record), so beit is paired on rounds 0 and 2."""
    root = tmp_path_factory.mktemp("rounds")
    run = root / "run"
    (run / "old").mkdir(parents=True)
    (run / "new").mkdir()
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "images": ["old", "new"]}))
    for image in ("old", "new"):
        for index, model in enumerate(MODELS):
            for repeat in range(3):
                if (image, model, repeat) == ("new", "beit", 1):
                    continue
                mean = (10.0 + 5 * index) * (STEP if repeat == 2 else 1.0) * (1 + NOISE[model][repeat])
                mean *= 1.0 + (0.002 * repeat if image == "new" else 0.0)
                path = run / image / f"{model}_bs1_eager_float32.r{repeat}.json"
                path.write_text(json.dumps(_record(image, model, repeat, mean)))
    build_report([run], root / "out", ["md", "html", "csv"])
    out = root / "out"
    return (pd.read_csv(out / "comparisons.csv"), (out / "report.md").read_text(encoding="utf-8"),
            (out / "report.html").read_text(encoding="utf-8"))


def test_image_changes_of_one_runs_rounds_are_paired_on_the_rounds_both_sides_ran(built):
    frame, markdown, _ = built
    changes = frame.query("kind == 'image_change'").set_index("model")
    assert set(changes["pairing"]) == {"paired by round"}
    assert set(changes.loc[["vit", "resnet", "deit"], "paired_rounds"]) == {3}
    # beit's round 1 ran on one side only: left out, the two shared rounds paired (each side's processes counted)
    assert (changes.loc["beit", "baseline_processes"], changes.loc["beit", "candidate_processes"]) == (3, 2)
    assert changes.loc["beit", "paired_rounds"] == 2
    # the shared step cancels in each round's ratio: the paired interval is narrow and "no change" at ±3%
    assert changes.loc["vit", "verdict"] == "no change" and changes.loc["vit", "high_pct"] < 3
    assert re.search(r"\| Image Classification/ViT \| eager \|.*\| no change \(±3%\) \| paired by round \|", markdown)
    assert re.search(r"\| Image Classification/BeiT \| eager \|.*\| paired by round \(2 of 3 rounds; 1 only one "
                     r"side ran\) \|", markdown)
    assert 'Pairing: "paired by round" where both cells ran in one run and share 2 or more rounds' in markdown
    assert frame.query("kind == 'cell'")["pairing"].isna().all()


def test_a_run_whose_cells_moved_together_by_round_says_so_in_its_notes(built):
    _, markdown, html = built
    line = next(line for line in markdown.splitlines() if "moved together by round" in line)
    assert line.startswith("> **Note:** Run run on CPU (hand-made), 7 cells in rounds 0-2: the run's cells moved "
                           "together by round (p = ")
    assert re.search(r"round 0: \+0\.0%, round 1: [+-]0\.\d%, round 2: \+[45]\.\d%", line), line
    assert "moved together by round" in html and "round 2: +" in html


def test_a_run_without_a_shared_step_gets_no_such_note(tmp_path):
    run = tmp_path / "run"
    (run / "old").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "images": ["old"]}))
    for index, model in enumerate(MODELS):
        for repeat in range(3):
            mean = (10.0 + 5 * index) * (1 + NOISE[model][repeat])
            (run / "old" / f"{model}_bs1_eager_float32.r{repeat}.json").write_text(
                json.dumps(_record("old", model, repeat, mean)))
    build_report([run], tmp_path / "out", ["md"])
    assert "moved together by round" not in (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
