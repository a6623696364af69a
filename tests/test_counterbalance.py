"""Counterbalanced order (issue 21): a linear drift of the machine cancels out of every image pair's
and mode pair's difference instead of favouring whichever ran first; run.json says where each
process ran.

The drift simulation plants the truth: every process of image X, mode M runs at exactly
truth[X, M] x (1 + drift x t / T), t its place in the run's order (``scheduler.rounds`` flattened),
so the estimated change (ratio of geometric means of process means, computed here) differs from
the planted one only by what the order lets the drift add.
"""
import math

import pytest

from host_helpers import RecordingBackend, local_run_options, use_backend, write_matrix
from matrixbench.executors.scheduler import positions, rounds
from matrixbench.matrix import Overrides, load_matrix
from matrixbench.run.command import run_matrix
from matrixbench.run.manifest import read_manifest
from matrixbench.run.pending import interleaved
from runner.core import Cell

DRIFT = 0.05          # the machine gets 5% slower from the run's first process to its last
IMAGES = ("stable", "nightly", "latest")
TRUTH = {("stable", "eager"): 10.0, ("stable", "default"): 6.0,
         ("nightly", "eager"): 10.3, ("nightly", "default"): 5.7,
         ("latest", "eager"): 9.0, ("latest", "default"): 5.0}


class Plan:
    """What rounds() reads of an image's work: its label and pending repeats."""

    def __init__(self, label, pending):
        self.label, self.pending = label, pending


def _cells(models=("a", "b")):
    return [Cell(model, "image-classification", "random", "full", 1, mode, False, "float32")
            for model in models for mode in ("eager", "default")]


def _simulate(order_of, repeats, images=IMAGES, seed=3):
    """Process means per (image, model, mode) under a linear drift, in the order ``order_of``
    gives the parts; ``order_of`` is scheduler.rounds or an uncounterbalanced stand-in."""
    cells = _cells()
    parts = [(Plan(image, interleaved(cells, repeats, seed)), interleaved(cells, repeats, seed)) for image in images]
    flat = [(plan.label, repeat) for plan, chosen in order_of(parts) for repeat in chosen]
    assert len(flat) == len(images) * len(cells) * repeats          # every process runs once
    means = {}
    for t, (image, repeat) in enumerate(flat):
        slowed = 1.0 + DRIFT * t / (len(flat) - 1)
        key = (image, repeat.cell.model, repeat.cell.mode)
        means.setdefault(key, []).append(TRUTH[image, repeat.cell.mode] * slowed)
    return means


def _geo(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def _biases(means):
    """|estimated / planted - 1| of every image change and every speed-up, in %."""
    biases = []
    for model in ("a", "b"):
        for mode in ("eager", "default"):
            for before, after in zip(IMAGES, IMAGES[1:]):
                estimated = _geo(means[after, model, mode]) / _geo(means[before, model, mode])
                planted = TRUTH[after, mode] / TRUTH[before, mode]
                biases.append(abs(estimated / planted - 1) * 100)
        for image in IMAGES:
            estimated = _geo(means[image, model, "eager"]) / _geo(means[image, model, "default"])
            planted = TRUTH[image, "eager"] / TRUTH[image, "default"]
            biases.append(abs(estimated / planted - 1) * 100)
    return biases


def _first_always_first(parts):
    """The order before issue 21: repeat by repeat, images and modes always in the same order."""
    indices = sorted({repeat.index for _, repeats in parts for repeat in repeats})
    fixed_modes = {(r.cell.model, r.cell.mode): n for n, r in enumerate(parts[0][1]) if r.index == 0}
    return [(plan, sorted((r for r in repeats if r.index == index),
                          key=lambda r: fixed_modes[r.cell.model, r.cell.mode]))
            for index in indices for plan, repeats in parts]


@pytest.mark.parametrize("repeats", [2, 3, 5, 10])
def test_a_linear_drift_shifts_no_change_or_speedup_by_as_much_as_0_3_percent(repeats):
    biases = _biases(_simulate(rounds, repeats))
    assert max(biases) < 0.3, (repeats, max(biases))
    if repeats % 2 == 0:
        assert max(biases) < 0.03   # an even number of rounds cancels it (but for the log's second order)


def test_without_counterbalancing_the_same_drift_biases_every_image_change():
    """The simulation can fail: the old order (earlier image always first) is biased by about
    drift / (number of images x repeats) for each adjacent image pair, 0.56% here."""
    biases = _biases(_simulate(_first_always_first, 3))
    assert max(biases) > 0.5


def test_images_alternate_abba_and_modes_reverse_on_odd_repeats():
    cells = _cells(models=("a",))
    order = interleaved(cells, 4, seed=11)
    modes = [[r.cell.mode for r in order if r.index == index] for index in range(4)]
    assert modes[1] == modes[0][::-1] and modes[2] == modes[0] and modes[3] == modes[1]
    parts = [(Plan(image, order), order) for image in ("A", "B", "C")]
    turns = [(plan.label, chosen[0].index) for plan, chosen in rounds(parts)]
    assert turns == [("A", 0), ("B", 0), ("C", 0), ("C", 1), ("B", 1), ("A", 1),
                     ("A", 2), ("B", 2), ("C", 2), ("C", 3), ("B", 3), ("A", 3)]


def test_positions_say_the_round_the_images_place_and_the_modes_place():
    cells = _cells(models=("a",))
    order = interleaved(cells, 2, seed=11)
    first_mode = order[0].cell.mode
    placed = positions([(Plan("A", order), order), (Plan("B", order), order)])
    eager_0, eager_1 = cells[0].id, f"{cells[0].id}.r1"
    assert placed[f"A/{eager_0}"] == {"round": 0, "image": 0, "mode": 0 if first_mode == "eager" else 1}
    assert placed[f"A/{eager_1}"] == {"round": 1, "image": 1, "mode": 1 if first_mode == "eager" else 0}
    assert placed[f"B/{eager_1}"]["image"] == 0 and len(placed) == 8


def test_run_json_records_where_each_process_ran(tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend())
    matrix = load_matrix(write_matrix(tmp_path), Overrides(repeats=2, models=["vit"], batch_sizes=[1]))
    run_matrix(matrix, local_run_options(tmp_path, order_seed=5))
    order = read_manifest(tmp_path / "results" / "r1")["order"]
    assert order["scheme"].startswith("counterbalanced")
    ran = [(request.image.name, repeat) for request in backend.requests for repeat in request.repeats()]
    assert len(order["positions"]) == len(ran) == 8
    for image, repeat in ran:
        place = order["positions"][f"{image}/{repeat.id}"]
        assert place["round"] == repeat.index
        assert place["image"] == ((0 if image == "stable" else 1) if repeat.index == 0 else
                                  (1 if image == "stable" else 0))
