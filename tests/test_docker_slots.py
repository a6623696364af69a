"""Real Docker, slots (issue 15): two slots of one core each run the tiny CPU matrix in two images
(the e2e test's, tests/data/docker-matrix.yaml, built once per session by tests/conftest.py); every record
shows its slot and core, the runner inside each container saw exactly its slot's core
(``os.sched_getaffinity``), and every image of a cell ran in one slot. The exclusive-timing run takes its image
change in turns too (``TURNS``): a unit's two containers at once in its slot, their blocks pinned to its core. Needs
a Docker daemon, the base images and 2 usable cores; skips, saying so, otherwise."""
import os
import threading
import time
from datetime import datetime

import jsonschema
import pytest

from runner import timing_board
from runner.schema import RECORD_SCHEMA
from test_docker_e2e import MATRIX_PATH, containers_of, finish, matrixbench, records

pytestmark = pytest.mark.docker

IMAGES = ("e2e-stable", "e2e-latest")
TURNS = ("--set", "turns=true", "--set", "turns_cores=1")   # the exclusive-timing run's


@pytest.fixture(scope="module")
def client(docker_test_client):
    return docker_test_client


@pytest.fixture(scope="module")
def slots_built(client, docker_e2e_images):
    """The e2e test's two images (its tags), on a machine with the 2 usable cores two slots need."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 usable cores for two slots of one core")
    return docker_e2e_images


@pytest.mark.parametrize("exclusive", [False, True], ids=["concurrent", "exclusive-timing"])
def test_two_one_core_slots_pin_each_container_to_its_core_in_both_images(client, slots_built, tmp_path,
                                                                          exclusive):
    run_id = "slots-e2e-exclusive" if exclusive else "slots-e2e"
    args = ["--run", run_id, "--slots", "2", "--cache-dir", str(tmp_path / "compile")]
    process = matrixbench(*args, *(["--exclusive-timing", *TURNS] if exclusive else []),
                          results=tmp_path / "results", matrix=MATRIX_PATH)
    # Concurrent: the host marks a slot 9 as timing on the run's board for the whole run; the
    # containers see the host's flock through the bind mount, so every cell that started after it
    # counts one other slot timing.
    holding = _HostSlotTiming(tmp_path / "results" / run_id / ".timing-board", process) if not exclusive else None
    try:
        code, output = finish(process)
    finally:
        held_since = holding.stop() if holding else None
    assert code == 0, output
    slot_of, cores_of, late, turns_of = {}, {}, [], {}
    for image in IMAGES:
        found = records(tmp_path / "results" / run_id / image)
        assert len(found) == 4, (image, sorted(found), output)
        for cid, record in found.items():
            jsonschema.validate(record, RECORD_SCHEMA)
            assert record["status"] == "ok", (cid, record["error"])
            block = record["placement"]
            assert block["slots"] == 2 and len(block["cores"]) == 1
            assert block["affinity"] == block["cores"], (image, cid, block)   # the container saw its core only
            assert block["timing"] == ("exclusive" if exclusive else "concurrent")
            assert block["busy_slots"] in ((0,) if exclusive else (0, 1, 2))
            started = datetime.fromisoformat(record["started_at"]).timestamp()
            if held_since is not None and started >= held_since + 2:
                late.append(block["busy_slots"])
            cell = record["cell"]
            slot_of.setdefault((cell["model"], cell["batch_size"]), set()).add(block["slot"])
            cores_of.setdefault(block["slot"], set()).add(tuple(block["cores"]))
            turns = record["timing"].get("turns")
            if exclusive:   # in turns: the blocks pinned to the slot's one core, which the container was given
                assert turns["lost"] is None and len(turns["block_ms"]) == 10, (image, cid, turns)
                assert turns["cores"] == block["cores"] and turns["threads"] == 1, (image, cid, turns)
                turns_of.setdefault(cid, {})[image] = (turns["pair_id"], turns["role"], block["slot"])
            else:
                assert turns is None
    assert all(len(slots) == 1 for slots in slot_of.values()), slot_of    # both images of a cell: one slot
    assert sorted(cores_of) == [0, 1] and all(len(cores) == 1 for cores in cores_of.values())
    assert cores_of[0] != cores_of[1]                                      # disjoint cores
    for cid, sides in turns_of.items():   # each cell's two images: one pair, first and second, in one slot
        (pair, role, slot), (other_pair, other_role, other_slot) = sides.values()
        assert pair == other_pair and {role, other_role} == {"first", "second"} and slot == other_slot, (cid, sides)
    assert len(turns_of) == (4 if exclusive else 0)
    assert containers_of(client, run_id, tmp_path / "results" / run_id) == []
    assert not (tmp_path / "results" / run_id / ".timing-board").exists()
    assert not any((tmp_path / "results" / run_id / ".turns").glob("*"))   # each pair's baton folder removed
    if not exclusive:
        assert len(late) >= 4 and all(busy >= 1 for busy in late), (held_since, late)


class _HostSlotTiming:
    """A thread that, once the run's board folder appears, holds slot 9's timing mark there."""

    def __init__(self, board_dir, process):
        self._board_dir, self._process = board_dir, process
        self._stop, self.since = threading.Event(), None
        self._thread = threading.Thread(target=self._hold, daemon=True)
        self._thread.start()

    def _hold(self):
        while not self._board_dir.is_dir():
            if self._stop.wait(0.05) or self._process.poll() is not None:
                return
        with timing_board.timing(timing_board.Board(str(self._board_dir), 9)):
            self.since = time.time()
            self._stop.wait()

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.since
