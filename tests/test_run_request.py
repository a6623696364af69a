"""matrixbench.environments.base.RunRequest: four frozen parts (image, work, paths, placement) and the
three ways an executor changes a request (narrowed, placed, relocated); the secrets never in repr()."""
import dataclasses
from pathlib import Path

import pytest

from matrixbench.environments.base import ImageRef, Paths, Placement, RunRequest, Work
from matrixbench.run.placement import Slot
from runner.core import Cell, Repeat

CELL = Cell(model="vit", model_id=None, config_path=None, task="image-classification",
            weights="random", size="tiny", batch_size=1, mode="eager", fullgraph=False, dtype="float32")
DEFAULT = dataclasses.replace(CELL, mode="default")
TOKEN = "hf_not_in_repr_0123"


def _request(tmp_path: Path) -> RunRequest:
    return RunRequest(ImageRef("stable-aa", torch="torch==2.0.1", content_hash="abc", build_of="stable"),
                      Work([CELL, DEFAULT], {"iterations": 3}, schedule=((0, 0), (1, 0), (1, 1)), order_seed=7),
                      Paths(tmp_path / "out", cache_dir=tmp_path / "cache", hf_cache_dir=tmp_path / "hf"),
                      Placement(gpus=True, gpu_ids=("1",)), env={"HF_TOKEN": TOKEN})


def test_every_part_is_frozen_and_the_secrets_stay_out_of_repr(tmp_path):
    request = _request(tmp_path)
    for part in (request, request.image, request.work, request.paths, request.placement):
        with pytest.raises(dataclasses.FrozenInstanceError):
            part.__setattr__("x", 1)
    assert TOKEN not in repr(request) and "stable-aa" in repr(request)
    assert request.image.built_as == "stable" and ImageRef("latest").built_as == "latest"


def test_narrowed_to_some_repeats_only_the_work_changes(tmp_path):
    request = _request(tmp_path)
    narrowed = request.for_repeats([Repeat(DEFAULT, 1)])
    assert narrowed.repeats() == [Repeat(DEFAULT, 1)] and narrowed.work.schedule == ((0, 1),)
    assert narrowed.work.order_seed == 7 and narrowed.work.settings == {"iterations": 3}
    assert (narrowed.image, narrowed.paths, narrowed.placement, narrowed.env) == (
        request.image, request.paths, request.placement, request.env)
    assert request.repeats() == [Repeat(CELL, 0), Repeat(DEFAULT, 0), Repeat(DEFAULT, 1)]   # unchanged


def test_placed_in_a_slot_it_keeps_its_gpus_and_compiles_in_a_cache_of_the_slots_own(tmp_path):
    request = _request(tmp_path)
    placed = request.placed(Slot(1, (2, 3)), slots=2, busy_units=2, timing_board=tmp_path / "board",
                            calibration={"phase": "loaded", "slots": 2})
    assert (placed.placement.gpus, placed.placement.gpu_ids, placed.placement.slot) == (True, ("1",), Slot(1, (2, 3)))
    assert (placed.placement.slots, placed.placement.busy_units, placed.placement.timing_board) == (
        2, 2, tmp_path / "board")
    assert placed.paths.cache_dir == tmp_path / "cache" / "slot-1" and placed.paths.out_dir == tmp_path / "out"
    assert placed.work_dir() == tmp_path / "out" / "slot-1" and request.work_dir() == tmp_path / "out"
    assert (placed.image, placed.work, placed.env) == (request.image, request.work, request.env)
    on_node = request.placed(Slot(0, (0,)), slots=1, busy_units=1, node={"node_ip": "10.0.0.2"}, gpu_ids=("3",))
    assert on_node.placement.gpu_ids == ("3",) and on_node.placement.node == {"node_ip": "10.0.0.2"}
    cold = request.relocated(Paths(tmp_path / "out"), request.env).placed(Slot(0, (0,)), slots=1, busy_units=1)
    assert cold.paths.cache_dir is None                       # --cold stays cold in a slot


def test_relocated_it_has_other_folders_and_env_and_the_same_work(tmp_path):
    request = _request(tmp_path)
    moved = request.relocated(Paths(Path("stable-aa")), {"A": "b"})
    assert moved.paths == Paths(Path("stable-aa")) and moved.env == {"A": "b"}
    assert (moved.image, moved.work, moved.placement) == (request.image, request.work, request.placement)
