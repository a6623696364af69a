"""Slots (issue 15): units of one model at one batch size in every image, longest first, one thread per slot; the
local backend pins each slot's runner to its cores, and every record says where it ran."""
import json
import os
from pathlib import Path

import pytest

from host_helpers import (
    ConcurrentRecordingBackend,
    Notes,
    RecordingBackend,
    local_run_options,
    make_record,
    small_matrix_data,
    use_backend,
    write_matrix,
)
from matrixbench.environments import base as requests
from matrixbench.environments.local import runner_env
from matrixbench.executors.scheduler import MODEL_S, make_units, run_on_slots
from matrixbench.matrix import Overrides, load_matrix
from matrixbench.run.command import run_matrix
from matrixbench.run.placement import Slot
from runner.records import PLACEMENT_ENV, placement
from runner.schema import read_record, write_record
from runner.timing_board import BOARD_ENV, Board, from_env

PROJECT_ROOT = Path(__file__).resolve().parents[1]
TWO_CORES = len(os.sched_getaffinity(0)) >= 2


def test_slots_is_a_matrix_setting_taking_auto_or_a_count(tmp_path):
    path = write_matrix(tmp_path)
    assert load_matrix(path).slots == "auto"
    assert load_matrix(path, Overrides(slots=2)).slots == 2
    data = small_matrix_data()
    data["slots"] = 0
    with pytest.raises(Exception, match="slots"):
        load_matrix(write_matrix(tmp_path, data))


def test_exclusive_timing_is_a_matrix_key_and_a_flag(tmp_path):
    from click.testing import CliRunner

    from matrixbench.cli import main

    path = write_matrix(tmp_path)
    assert load_matrix(path).exclusive_timing is False
    assert load_matrix(path, Overrides(exclusive_timing=True)).exclusive_timing is True
    data = small_matrix_data()
    data["exclusive_timing"] = True
    assert load_matrix(write_matrix(tmp_path, data, name="x.yaml")).exclusive_timing is True
    data["exclusive_timing"] = "yes"
    with pytest.raises(Exception, match="exclusive_timing"):
        load_matrix(write_matrix(tmp_path, data, name="y.yaml"))
    from matrixbench.cli import run
    result = CliRunner().invoke(main, ["run", "--help"])
    # a rare flag: accepted, out of the help, its key listed under --set
    assert "exclusive_timing" in result.output
    assert "--exclusive-timing" in [opt for param in run.params for opt in param.opts]


@pytest.mark.skipif(not TWO_CORES, reason="needs 2 usable cores")
def test_two_slots_run_each_model_in_every_image_on_one_slot_at_once(tmp_path, monkeypatch):
    from matrixbench.run.progress import NullProgress

    class SlotWatch(NullProgress):
        def __init__(self):
            super().__init__()
            self.seen = []

        def slot_running(self, slot, image_name=None, cell=None):
            super().slot_running(slot, image_name, cell)
            self.seen.append((slot, self.state.slot_line(slot)))

    backend = use_backend(monkeypatch, ConcurrentRecordingBackend())
    matrix = load_matrix(write_matrix(tmp_path), Overrides(slots=2))
    progress = SlotWatch()
    summary = run_matrix(matrix, local_run_options(tmp_path), progress=progress)
    assert summary.statuses() == {"ok": 16}
    assert progress.state.done == 16 and progress.state.total == 16      # one count over both slots
    assert {slot for slot, line in progress.seen if " bs=" in line} == {0, 1}   # each slot's cell shown
    assert progress.state.slots_text() == "slot 0: idle; slot 1: idle"
    assert backend.most == 2                                   # the two slots ran at once
    units = [(request, thread, {(cell.model, cell.batch_size) for cell in request.work.cells})
             for request, thread, _running in backend.started]
    assert all(len(unit) == 1 for _, _, unit in units)               # one model at one batch size
    slot_of = {}
    for _request, thread, unit in units:
        slot_of.setdefault(min(unit), set()).add(thread)
    assert all(len(threads) == 1 for threads in slot_of.values())   # a unit never changes slot
    assert sorted((request.image.name, min(unit)) for request, _, unit in units) == sorted(
        (image, (model, bs)) for image in ("stable", "latest") for model in ("vit", "detr-resnet-101") for bs in (1, 4))
    cores = sorted({tuple(r.placement.slot.cores) for r in backend.requests})
    assert len(cores) == 2 and not set(cores[0]) & set(cores[1])
    assert all(r.work_dir().name == f"slot-{r.placement.slot.index}" for r in backend.requests)
    assert all(r.paths.cache_dir == tmp_path / "cache" / r.image.name / f"slot-{r.placement.slot.index}"
               for r in backend.requests)


class Work:
    """An image's pending repeats, as make_units reads them (ImageWork's out_dir, image_name, pending)."""

    def __init__(self, out_dir, pending, image_name="latest"):
        self.out_dir, self.pending, self.image_name = out_dir, pending, image_name


def repeat_of(model, mode, batch_size=1):
    from runner.core import Cell, Repeat

    return Repeat(Cell(model, "image-classification", "random", "full", batch_size, mode, False, "float32"))


def _earlier_record(folder, repeat, duration_s, torch="2.13.0"):
    """A record of ``repeat`` in ``folder`` that took ``duration_s`` with ``torch``."""
    record = make_record(repeat.cell)
    record.duration_s = duration_s
    record.environment = {**record.environment, "torch": torch}
    folder.mkdir(parents=True, exist_ok=True)
    write_record(folder, record)


def test_units_go_longest_first_with_earlier_durations_before_the_model(tmp_path):
    cell = repeat_of
    units = make_units([Work(tmp_path, [cell("a", "eager"), cell("b", "default"), cell("b", "eager"),
                                         cell("b", "eager", 4)])])
    assert [(u.name, u.estimate_s) for u in units] == [("b bs=1", MODEL_S["default"] + MODEL_S["eager"]),
                                                       ("a bs=1", MODEL_S["eager"]), ("b bs=4", MODEL_S["eager"])]


def test_a_units_runners_take_turns_between_images_repeat_by_repeat(tmp_path):
    from runner.core import Repeat

    a0, b0 = repeat_of("a", "eager"), repeat_of("a", "default")
    repeats = [a0, b0, Repeat(a0.cell, 1), Repeat(b0.cell, 1)]
    stable, latest = Work(tmp_path / "stable", repeats, "stable"), Work(tmp_path / "latest", repeats, "latest")
    (unit,) = make_units([stable, latest])
    turns = [(plan.image_name, [(r.cell.mode, r.index) for r in chosen]) for plan, chosen in unit.rounds()]
    assert turns == [("stable", [("eager", 0), ("default", 0)]), ("latest", [("eager", 0), ("default", 0)]),
                     ("latest", [("eager", 1), ("default", 1)]), ("stable", [("eager", 1), ("default", 1)])]
    (single,) = make_units([Work(tmp_path / "one", [a0, b0])])
    assert single.rounds() == single.parts            # one repeat per cell: one runner per image, as before


def test_estimates_take_the_newest_earlier_run_of_the_same_cell_image_and_torch(tmp_path):
    root = tmp_path / "results"
    a, b, c = repeat_of("a", "eager"), repeat_of("b", "eager"), repeat_of("c", "eager")
    _earlier_record(root / "older" / "latest", a, 500.0)
    _earlier_record(root / "older" / "latest", b, 700.0)
    os.utime(root / "older" / "latest", ns=(1, 1))                  # older's records were written first
    _earlier_record(root / "newer" / "latest", a, 40.0)             # newest wins over older's 500
    _earlier_record(root / "newer" / "stable", c, 900.0)            # another image: not c's in latest
    _earlier_record(root / "newer" / "latest", c, 800.0, torch="2.0.1+cu118")   # another torch: not used
    units = make_units([Work(root / "this" / "latest", [a, b, c])], torch_of={"latest": "2.13.0"})
    assert {u.model: u.estimate_s for u in units} == {"a": 40.0, "b": 700.0, "c": MODEL_S["eager"]}
    assert [u.model for u in units] == ["b", "a", "c"]
    _earlier_record(root / "this" / "latest", b, 3.0)               # this run's own record comes first
    units = make_units([Work(root / "this" / "latest", [a, b, c])], torch_of={"latest": "2.13.0"})
    assert {u.model: u.estimate_s for u in units}["b"] == 3.0
    # an image that pins no torch (None) matches earlier records by image and cell only
    units = make_units([Work(root / "this" / "latest", [c])], torch_of={"latest": None})
    assert units[0].estimate_s == 800.0


def test_a_repeat_added_to_a_run_is_estimated_from_the_runs_nearest_earlier_repeat_of_its_cell(tmp_path):
    """More repeats for a run (--repeats 5 after 3): each new process is expected to take what this run's
    latest repeat of the cell took (a warm compile), not the generic model nor the cold repeat 0."""
    from runner.core import Repeat

    this = tmp_path / "results" / "this" / "latest"
    a = repeat_of("a", "default")
    for index, duration in ((0, 30.0), (1, 4.0)):
        record = make_record(a.cell)
        record.duration_s, record.repeat = duration, index
        this.mkdir(parents=True, exist_ok=True)
        write_record(this, record)
    units = make_units([Work(this, [Repeat(a.cell, 2), Repeat(a.cell, 3)])])
    assert units[0].estimate_s == 8.0 != 2 * MODEL_S["default"]


def test_the_first_error_stops_new_units_and_is_raised():
    ran = []

    def run_unit(slot, unit, busy):
        ran.append(unit)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run_on_slots([Slot(0, (0,))], ["u1", "u2", "u3"], run_unit, lambda: None)
    assert ran == ["u1"]


def _unplaced(out_dir, gpus=False):
    return requests.RunRequest(requests.ImageRef("latest"), requests.Work([], {}), requests.Paths(out_dir),
                               requests.Placement(gpus=gpus))


def test_local_runner_env_of_a_slot_sets_threads_gpu_and_placement(tmp_path):
    slot = Slot(1, (4, 5, 6), gpu_index=3, gpu_uuid="GPU-3f3c", numa_node=0)
    request = _unplaced(tmp_path, gpus=True).placed(slot, slots=2, busy_units=2,
                                                    timing_board=tmp_path / "run" / ".timing-board",
                                                    exclusive_timing=True)
    env = runner_env({}, request, {})
    assert (env["OMP_NUM_THREADS"], env["TORCHINDUCTOR_COMPILE_THREADS"]) == ("3", "3")
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-3f3c"
    block = placement({PLACEMENT_ENV: env[PLACEMENT_ENV]})
    assert (block["slot"], block["cores"], block["gpu_uuid"], block["numa_node"], block["busy_units"]) == (
        1, [4, 5, 6], "GPU-3f3c", 0, 2)
    assert block["affinity"] == sorted(os.sched_getaffinity(0))
    assert from_env(env) == Board(str(tmp_path / "run" / ".timing-board"), 1, exclusive=True)


def test_docker_mounts_the_timing_board_and_names_its_mount(tmp_path):
    from matrixbench.environments.docker import TIMING_BOARD_MOUNT, container_env, mounts

    board = tmp_path / "run" / ".timing-board"
    request = _unplaced(tmp_path / "run" / "latest").placed(Slot(0, (0,)), slots=1, busy_units=1, timing_board=board)
    assert mounts(request)[board.resolve()] == (TIMING_BOARD_MOUNT, "rw")
    assert from_env(container_env(request)) == Board(TIMING_BOARD_MOUNT, 0, exclusive=False)
    unplaced = _unplaced(tmp_path / "run" / "latest")
    assert BOARD_ENV not in container_env(unplaced) and TIMING_BOARD_MOUNT not in str(mounts(unplaced))


@pytest.mark.skipif(not TWO_CORES, reason="needs 2 usable cores")
# --exclusive-timing's run is `slow` (issue 35: make test runs it, make test-quick leaves it out): the same real
# two-slot flow as the default's, 30-45 s on a 2-core machine, whose board is tested in test-quick without models
# (test_runner_timing_board: one slot times at a time; a slot timing alone records timing "exclusive").
@pytest.mark.parametrize("exclusive", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_two_slots_on_tiny_models_pin_each_runner_to_its_core(tmp_path, monkeypatch, exclusive):
    """The real runner, local backend, --slots 2: each record's reported affinity is its slot's
    cores, and says how it was timed (--exclusive-timing: alone, no other slot seen timing). With
    --exclusive-timing it is marked slow: a duplicate of the default's real flow, its timing board covered by
    test_runner_timing_board in make test-quick."""
    from click.testing import CliRunner

    from matrixbench.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    args = ["run", "--matrix", str(PROJECT_ROOT / "matrix-cpu-smoke.yaml"), "--images", "latest",
            "--models", "resnet,vit", "--modes", "eager", "--iterations", "2", "--warmup", "0",
            "--backend", "local", "--device", "cpu", "--slots", "2", "--cache-dir", str(tmp_path / "cache")]
    result = CliRunner().invoke(main, args + (["--exclusive-timing"] if exclusive else []))
    assert result.exit_code == 0, result.output
    out_dir = tmp_path / "results" / "default" / "latest"
    records = [read_record(p) for p in sorted(out_dir.glob("*-tiny_*.json"))]
    assert {r["cell"]["model"] for r in records} == {"resnet", "vit"}      # every repeat of both
    slot_of = {}
    for record in records:
        slot_of.setdefault(record["cell"]["model"], set()).add(record["placement"]["slot"])
    assert sorted(slot_of.values()) == [{0}, {1}]          # one slot per model (one batch size here)
    slots = [0, 1]
    for record in records:
        block = record["placement"]
        assert block["affinity"] == block["cores"] and len(block["cores"]) == 1
        assert block["slots"] == 2 and block["gpu_uuid"] is None
        assert block["timing"] == ("exclusive" if exclusive else "concurrent")
        assert block["busy_slots"] in ((0,) if exclusive else (0, 1))
    assert len({tuple(r["placement"]["cores"]) for r in records}) == 2
    assert json.loads((out_dir / f"slot-{slots[0]}" / "cells.json").read_text())["cells"]
    assert not (out_dir.parent / ".timing-board").exists()                 # the board goes with the run


@pytest.mark.skipif(not TWO_CORES, reason="needs 2 usable cores")
@pytest.mark.slow
def test_two_slots_run_an_aa_pair_in_turns_each_pair_in_one_slot_its_blocks_on_its_core(tmp_path, monkeypatch):
    """The real runner, local backend, --slots 2, ``run --aa latest`` in turns (turns_cores 1): tiny ResNet and
    ViT eager, 2 rounds. Each pair's two records share a pair id, a slot and that slot's core, their blocks all
    measured; both models ran, each model's pairs in one slot (a unit)."""
    from click.testing import CliRunner

    from matrixbench.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    args = ["run", "--matrix", str(PROJECT_ROOT / "matrix-cpu-smoke.yaml"), "--aa", "latest",
            "--models", "resnet,vit", "--modes", "eager", "--iterations", "20", "--warmup", "1", "--repeats", "2",
            "--backend", "local", "--device", "cpu", "--slots", "2", "--set", "turns=true", "--set", "turns_cores=1",
            "--cache-dir", str(tmp_path / "cache")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    run_path = tmp_path / "results" / "aa-latest"
    records = [read_record(path) for name in ("latest", "latest-aa")
               for path in sorted((run_path / name).glob("*-tiny_*.json"))]
    assert len(records) == 8 and all(record["status"] == "ok" for record in records), result.output
    by_pair = {}
    for record in records:
        turns = record["timing"]["turns"]
        assert turns["lost"] is None and len(turns["block_ms"]) == 10
        by_pair.setdefault(turns["pair_id"], []).append(record)
    assert len(by_pair) == 4                                           # 2 models x 2 rounds
    slot_of = {}
    for pair in by_pair.values():
        assert sorted(r["environment"]["image_name"] for r in pair) == ["latest", "latest-aa"]
        assert sorted(r["timing"]["turns"]["role"] for r in pair) == ["first", "second"]
        (slot,) = {r["placement"]["slot"] for r in pair}
        (cores,) = {tuple(r["placement"]["cores"]) for r in pair}
        assert all(r["timing"]["turns"]["cores"] == [cores[-1]] for r in pair)
        slot_of.setdefault(pair[0]["cell"]["model"], set()).add(slot)
    assert set(slot_of) == {"resnet", "vit"} and all(len(slots) == 1 for slots in slot_of.values())
    assert not (run_path / ".turns").exists() or not any((run_path / ".turns").iterdir())   # the batons removed


GPU_DATA = Path(__file__).parent / "data" / "gpu" / "nvidia-smi"


def _smi(apps):
    def run(argv):
        if argv[1] == "--query-gpu=index,pci.bus_id":
            return 9, ""                                          # no bus ids: the topology from topo -m
        if argv[1].startswith("--query-gpu="):
            return 0, (GPU_DATA / "a100x8-query-gpu.csv").read_text()
        if argv[1:] == ["topo", "-m"]:
            return 0, (GPU_DATA / "a100x8-topo.txt").read_text()
        if argv[1].startswith("--query-compute-apps="):
            return 0, (GPU_DATA / apps).read_text() if apps else ""
        raise AssertionError(argv)
    return run


def test_gpu_slots_refuse_a_busy_gpu_and_keep_each_model_on_one_gpu(tmp_path, monkeypatch):
    from matrixbench.errors import RunError
    from matrixbench.run import placement

    monkeypatch.setattr(placement, "run_command", _smi("apps-busy.csv"))
    monkeypatch.setattr(placement, "usable_cores", lambda: ((0, 1), None))
    backend = use_backend(monkeypatch, RecordingBackend(gpus=True))
    matrix = load_matrix(write_matrix(tmp_path), Overrides(slots="auto"))
    with pytest.raises(RunError, match="48213.*--allow-busy-gpus"):
        run_matrix(matrix, local_run_options(tmp_path, device="auto", gpu="0,4"))
    assert backend.requests == []
    run_matrix(matrix, local_run_options(tmp_path, device="auto", gpu="0,4", allow_busy_gpus=True, run_name="r2"))
    gpu_of = {}
    for request in backend.requests:
        unit = (request.work.cells[0].model, request.work.cells[0].batch_size)
        gpu_of.setdefault(unit, set()).add(request.placement.slot.gpu_uuid)
        assert all((cell.model, cell.batch_size) == unit for cell in request.work.cells)
    assert all(len(uuids) == 1 for uuids in gpu_of.values())      # every image of a cell: one GPU
    assert set().union(*gpu_of.values()) <= {"GPU-0f3c2a1e-7b6d-4e5f-8a9b-0c1d2e3f4a50",
                                             "GPU-4f3c2a1e-7b6d-4e5f-8a9b-0c1d2e3f4a54"}
    assert {r.image.name for r in backend.requests} == {"stable", "latest"}


def test_exclusive_timing_without_slots_says_it_changes_nothing(tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend())
    progress = Notes()
    run_matrix(load_matrix(write_matrix(tmp_path), Overrides(exclusive_timing=True)), local_run_options(tmp_path),
               progress=progress)
    assert any("no slots" in note for note in progress.notes)
    assert all(request.placement.timing_board is None for request in backend.requests)
