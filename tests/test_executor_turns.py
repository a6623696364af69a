"""Image changes in turns (matrix setting ``turns``, executors/turns.py): which runners start at once in pairs, the
cells file's ``turns`` object each backend writes, the sequential executor starting a pair at once, and the
executors that refuse turns."""
import dataclasses
import json
import re
import threading
import time
from pathlib import Path

import pytest

from docker_fakes import FakeImage, FakeSDK
from host_helpers import (
    RecordingBackend,
    local_run_options,
    make_record,
    small_matrix_data,
    use_backend,
    write_matrix,
    write_stand_in,
)
from matrixbench.build import docker_client
from matrixbench.environments.base import ImageRef, Paths, RunRequest, Turns, Work
from matrixbench.environments.docker import TURNS_MOUNT, DockerBackend
from matrixbench.environments.local import LocalBackend
from matrixbench.errors import OptionConflictError, RunError
from matrixbench.executors import check_options, create_executor
from matrixbench.executors.scheduler import takes_units
from matrixbench.executors.sequential import SequentialExecutor
from matrixbench.executors.slots import SlotsExecutor
from matrixbench.executors.turns import TurnPair, image_pairs, pinned_cores, round_steps, slot_cores, steps, steps_of
from matrixbench.matrix import Overrides, expand_cells, load_matrix
from matrixbench.matrix.comparisons import AA_CHANGE, IMAGE_CHANGE, SPEEDUP, Comparison
from matrixbench.run.command import RunOptions, run_matrix
from matrixbench.run.layout import image_dir, turns_dir
from matrixbench.run.pending import ImageWork, interleaved
from matrixbench.run.placement import usable_cores
from runner.core import Cell, Repeat
from runner.schema import CELLS_SCHEMA_VERSION, write_record

CELLS = [Cell(model, "image-classification", "random", "tiny", 1, mode, False, "float32")
         for model in ("vit", "resnet") for mode in ("eager", "default")]


def work(label, pending, cells=CELLS):
    return ImageWork(label, Path("/results/r") / label, list(cells), list(pending))


def comparison(kind, baseline, candidate, cell=CELLS[0]):
    return Comparison(kind, (baseline, cell), (candidate, cell))


def keys():
    counter = iter(range(1000))
    return lambda: f"k{next(counter)}"


# --- pairing --------------------------------------------------------------------------------

def test_image_pairs_are_disjoint_in_list_order_and_skip_comparisons_within_one_image():
    found = [comparison(SPEEDUP, "a", "a"), comparison(IMAGE_CHANGE, "a", "b"), comparison(IMAGE_CHANGE, "a", "b"),
             comparison(IMAGE_CHANGE, "b", "c"), comparison(AA_CHANGE, "c", "c-aa")]
    assert image_pairs(found) == [("a", "b"), ("c", "c-aa")]


def test_two_images_run_each_round_as_one_pair_whose_first_role_alternates_by_round():
    repeats = interleaved(CELLS, 3, seed=5)
    found = steps([work("stable", repeats), work("latest", repeats)], [("stable", "latest")], keys())
    assert all(isinstance(step, TurnPair) for step in found) and len(found) == 3
    assert [[(side.work.label, side.role, side.partner) for side in step.sides] for step in found] == [
        [("stable", "first", "latest"), ("latest", "second", "stable")],
        [("latest", "first", "stable"), ("stable", "second", "latest")],
        [("stable", "first", "latest"), ("latest", "second", "stable")]]
    for index, step in enumerate(found):
        first, second = step.sides
        assert first.repeats == second.repeats == [r for r in repeats if r.index == index]   # same order both sides
    assert [step.pair_id for step in found] == ["k0", "k1", "k2"]


def test_a_third_image_of_the_chain_runs_alone_in_its_place_of_the_round():
    repeats = interleaved(CELLS, 2, seed=1)
    works = [work(name, repeats) for name in ("stable", "nightly", "latest")]
    found = steps(works, image_pairs([comparison(IMAGE_CHANGE, "stable", "nightly"),
                                      comparison(IMAGE_CHANGE, "nightly", "latest")]), keys())
    shape = [("pair", [s.work.label for s in step.sides]) if isinstance(step, TurnPair) else ("alone", step[0].label)
             for step in found]
    # round 0: stable, nightly, latest; round 1 reversed (ABBA): latest alone first, then the pair, candidate first
    assert shape == [("pair", ["stable", "nightly"]), ("alone", "latest"),
                     ("alone", "latest"), ("pair", ["nightly", "stable"])]


def test_a_repeat_one_side_already_recorded_runs_alone_on_the_other():
    repeats = interleaved(CELLS, 1, seed=2)
    recorded = repeats[1]          # latest has it (a resumed run): stable runs it alone
    parts = [(work("stable", repeats), repeats), (work("latest", repeats), [r for r in repeats if r != recorded])]
    found = round_steps(parts, [("stable", "latest")], 0, keys())
    pair, alone = found
    assert isinstance(pair, TurnPair)
    assert [side.repeats for side in pair.sides] == [[r for r in repeats if r != recorded]] * 2
    assert alone[0].label == "stable" and alone[1] == [recorded]


def test_sides_with_no_repeat_in_common_run_alone_and_keys_are_unique():
    stable = [Repeat(CELLS[0]), Repeat(CELLS[1])]
    latest = [Repeat(CELLS[2])]
    found = round_steps([(work("stable", stable), stable), (work("latest", latest), latest)], [("stable", "latest")], 0)
    assert [step[0].label for step in found] == ["stable", "latest"]   # (work, repeats): alone, as without turns
    pairs = steps([work("stable", interleaved(CELLS, 4, 0)), work("latest", interleaved(CELLS, 4, 0))],
                  [("stable", "latest")])
    assert len({step.pair_id for step in pairs}) == 4 and all(len(step.pair_id) == 32 for step in pairs)


# --- the cells file -------------------------------------------------------------------------

def turns_request(tmp_path, role="first"):
    paths = Paths(tmp_path / "results" / "run1" / "stable", hf_cache_dir=tmp_path / "hf")
    request = RunRequest(ImageRef("stable"), Work(CELLS[:2], {"iterations": 2, "device": "cpu"}), paths)
    return request.in_turns(Turns(role, "latest", "abc123", tmp_path / "results" / "run1" / ".turns" / "abc123"))


def test_the_local_backend_writes_the_host_folder_in_the_cells_file(tmp_path):
    request = turns_request(tmp_path)
    request.paths.out_dir.mkdir(parents=True)
    assert LocalBackend(python=str(write_stand_in(tmp_path / "python-stand-in"))).run(request) == 0
    doc = json.loads((request.paths.out_dir / "seen.json").read_text())["doc"]
    assert doc["schema_version"] == CELLS_SCHEMA_VERSION
    assert doc["turns"] == {"folder": str(tmp_path / "results" / "run1" / ".turns" / "abc123"), "role": "first",
                            "partner": "latest", "pair_id": "abc123"}


def test_a_runner_alone_gets_no_turns_key(tmp_path):
    request = dataclasses.replace(turns_request(tmp_path), work=Work(CELLS[:2], {"iterations": 2}))
    request.paths.out_dir.mkdir(parents=True)
    assert LocalBackend(python=str(write_stand_in(tmp_path / "python-stand-in"))).run(request) == 0
    assert "turns" not in json.loads((request.paths.out_dir / "seen.json").read_text())["doc"]


def test_docker_mounts_the_turns_folder_at_slash_turns_and_the_cells_file_says_so(tmp_path):
    sdk = FakeSDK()
    sdk.images_by_tag["matrixbench:stable"] = FakeImage(
        "matrixbench:stable", {"matrixbench": "1", "matrixbench.torch": "2.0.1"}, "sha256:stable")
    request = turns_request(tmp_path, role="second")
    assert DockerBackend(client=docker_client.DockerClient(sdk)).run(request) == 0
    (container,) = sdk.started
    binds = {spec["bind"]: (host, spec["mode"]) for host, spec in container.kwargs["volumes"].items()}
    assert binds[TURNS_MOUNT] == (str(request.work.turns.folder.resolve()), "rw") and TURNS_MOUNT == "/turns"
    assert request.work.turns.folder.is_dir()   # made here, so Docker does not make it as root
    doc = json.loads((request.paths.out_dir / "cells.json").read_text())
    assert doc["turns"] == {"folder": "/turns", "role": "second", "partner": "latest", "pair_id": "abc123"}


def test_a_role_outside_the_batons_is_refused():
    with pytest.raises(RunError, match="turns role: must be one of first, second, got 'third'"):
        Turns("third", "latest", "k", Path("/t"))


# --- the sequential executor ----------------------------------------------------------------

class PairedBackend(RecordingBackend):
    """Runs a runner in turns only once its partner runs too (a barrier of two: a runner started alone would wait
    out the timeout and fail the test); notes how many runners ran at each start and the turns folder's state."""

    def __init__(self):
        super().__init__()
        self.barrier, self.lock, self.now, self.seen = threading.Barrier(2, timeout=10), threading.Lock(), 0, []

    def run(self, request):
        if request.work.check:   # the run's model check (every model builds)
            return super().run(request)
        with self.lock:
            self.now += 1
            self.seen.append((request.image.name, request.work.turns, self.now, [r.id for r in request.repeats()]))
        try:
            if request.work.turns is not None:
                assert request.work.turns.folder.is_dir()
                self.barrier.wait()       # both sides of the pair running at once
            return super().run(request)
        finally:
            with self.lock:
                self.now -= 1


def turns_matrix(tmp_path, **settings):
    data = {**small_matrix_data(), "turns": True, "repeats": 2, **settings}
    return load_matrix(write_matrix(tmp_path, data), Overrides(models=["vit"], batch_sizes=[1]))


def test_the_sequential_executor_starts_a_pair_at_once_and_a_repeat_one_side_has_alone(tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, PairedBackend())
    matrix = turns_matrix(tmp_path)
    eager = next(cell for cell in expand_cells(matrix) if cell.mode == "eager")
    recorded = make_record(eager)
    recorded.repeat = 1
    write_record(image_dir(tmp_path / "results" / "r1", "latest"), recorded)   # latest has it: stable's runs alone
    run_matrix(matrix, local_run_options(tmp_path, executor="sequential"))

    in_turns = [(name, turns.pair_id, turns.role, turns.partner, ids) for name, turns, _, ids in backend.seen if turns]
    alone = [(name, now, ids) for name, turns, now, ids in backend.seen if turns is None]
    assert alone == [("stable", 1, [f"{eager.id}.r1"])]                # started with nothing else running
    assert max(now for _, turns, now, _ in backend.seen if turns) == 2     # a pair's runners overlapped
    by_key = {}
    for name, key, role, partner, ids in in_turns:
        by_key.setdefault(key, {})[name] = (role, partner, ids)
    first, second = by_key.values()                                        # one key per pair launch, two launches
    assert (first["stable"][:2], first["latest"][:2]) == (("first", "latest"), ("second", "stable"))
    assert (second["latest"][:2], second["stable"][:2]) == (("first", "stable"), ("second", "latest"))
    assert first["stable"][2] == first["latest"][2] and len(first["stable"][2]) == 2   # same repeats, same order
    assert second["stable"][2] == second["latest"][2] and len(second["stable"][2]) == 1
    run_path = tmp_path / "results" / "r1"
    assert not any(turns_dir(run_path).iterdir())                          # each pair's folder removed after it
    cells_file = json.loads((image_dir(run_path, "latest") / "cells.json").read_text())
    assert cells_file["turns"]["role"] == "first" and cells_file["turns"]["partner"] == "stable"


def test_turns_run_under_ray_whose_turns_cores_are_its_nodes_not_this_machines(tmp_path):
    """--executor ray takes turns (a unit's task runs its pairs on its node); its turns_cores are checked against
    the cluster's nodes as the run starts (tests/test_executor_ray_tasks.py), not against the driver's cores."""
    check_options(turns_matrix(tmp_path), RunOptions(executor="ray"))
    check_options(turns_matrix(tmp_path, turns_cores=1024), RunOptions(executor="ray"))
    with pytest.raises(OptionConflictError, match="turns_cores: 1024: this run may use"):   # one machine: its own
        check_options(turns_matrix(tmp_path, turns_cores=1024), RunOptions(executor="slots"))
    with pytest.raises(OptionConflictError, match="turns_cores: 1 pins .* set turns: true"):
        check_options(turns_matrix(tmp_path, turns=False, turns_cores=1), RunOptions(executor="ray"))


def test_turns_take_the_executor_a_run_without_them_would(tmp_path):
    """Slots where the run has them (given, or auto on a GPU run), else one runner, or pair, at a time."""
    note = []
    for executor, slots in ((None, 2), ("slots", 2), ("sequential", "auto")):   # sequential: no slots to give
        check_options(turns_matrix(tmp_path, slots=slots), RunOptions(executor=executor))
    made = create_executor(None, RunOptions(), matrix=turns_matrix(tmp_path, slots=2), gpus=False, environ={},
                           note=note.append)
    assert isinstance(made, SlotsExecutor) and len(made.slot_plan.slots) == 2
    made = create_executor(None, RunOptions(), matrix=turns_matrix(tmp_path), gpus=False, environ={}, note=note.append)
    assert isinstance(made, SequentialExecutor)
    assert takes_units(None, "auto", True) and not takes_units(None, "auto", False)


def test_in_units_each_units_images_take_turns_round_by_round_and_only_on_its_model():
    """The slots executor's steps: a unit (one model and batch size in every image) pairs its images round by
    round as the sequential run pairs the run's, never across units."""
    from matrixbench.executors.scheduler import make_units

    repeats = interleaved(CELLS, 2, seed=3)
    works = [work(name, repeats) for name in ("stable", "latest")]
    units = make_units(works)
    assert len(units) == 2
    for unit in units:
        found = steps_of(unit.parts, [("stable", "latest")], keys())
        assert all(isinstance(step, TurnPair) for step in found) and len(found) == 2   # one pair a round
        for index, step in enumerate(found):
            assert [side.role for side in step.sides] == ["first", "second"]
            assert step.sides[0].work.label == ("stable" if index % 2 == 0 else "latest")
            assert {repeat.cell.model for side in step.sides for repeat in side.repeats} == {unit.model}
            assert {repeat.index for side in step.sides for repeat in side.repeats} == {index}


# --- pinning (matrix setting turns_cores) ------------------------------------------------------

def test_slot_cores_are_each_slots_last_ones_and_a_slot_with_too_few_is_refused_naming_it():
    from matrixbench.run.placement import Slot

    slots = (Slot(0, (0, 1, 2)), Slot(1, (5, 3, 4)))
    assert slot_cores(2, slots) == {0: (1, 2), 1: (4, 5)}
    assert slot_cores(0, slots) == {0: (), 1: ()}
    with pytest.raises(OptionConflictError, match=r"turns_cores: 2: slot 1 has 1 CPU core\(s\) \(7\), .* at most 1 "
                                                  r"\(--set turns_cores=1\), fewer slots, or 0 not to pin"):
        slot_cores(2, (Slot(0, (0, 1)), Slot(1, (7,))))

def test_pinned_cores_are_the_last_usable_ones_and_more_than_there_are_is_refused_naming_the_setting():
    assert pinned_cores(0, (0, 1, 2, 3)) == ()
    assert pinned_cores(2, (3, 0, 2, 1)) == (2, 3)
    assert pinned_cores(1, (4, 6)) == (6,)
    with pytest.raises(OptionConflictError, match=r"turns_cores: 5: this run may use 2 CPU core\(s\) \(0-1\); set "
                                                  r"turns_cores to at most 2 .*or 0 not to pin"):
        pinned_cores(5, (0, 1))


def test_turns_cores_without_turns_is_refused_naming_both_settings(tmp_path):
    with pytest.raises(OptionConflictError, match="turns_cores: 1 pins .* set turns: true .* or drop turns_cores"):
        check_options(turns_matrix(tmp_path, turns=False, turns_cores=1), RunOptions())
    check_options(turns_matrix(tmp_path, turns_cores=1), RunOptions())


def test_a_pinned_pair_gets_the_last_usable_core_in_its_turns_and_cells_file(tmp_path, monkeypatch):
    """Both runners of every pair get the same cores (the last this run may use: run.placement.usable_cores),
    written into the cells file's turns; with turns_cores: 0 no cores are written (cells file as before)."""
    backend = use_backend(monkeypatch, PairedBackend())
    run_matrix(turns_matrix(tmp_path, turns_cores=1), local_run_options(tmp_path, executor="sequential"))
    core = usable_cores()[0][-1]
    assert {turns.cores for _, turns, _, _ in backend.seen} == {(core,)}
    assert len(backend.seen) == 4   # 2 rounds, 2 sides
    cells_file = json.loads((image_dir(tmp_path / "results" / "r1", "stable") / "cells.json").read_text())
    assert cells_file["turns"]["cores"] == [core]
    request = turns_request(tmp_path)
    assert "cores" not in request.work.turns.to_dict()
    assert "turns_cores" not in turns_matrix(tmp_path, turns_cores=0).to_dict()   # not pinned: hashes as before


@pytest.mark.skipif(len(usable_cores()[0]) < 2, reason="needs 2 usable cores")
def test_the_slots_executor_runs_each_units_pairs_in_its_slot_their_blocks_on_its_last_core(tmp_path, monkeypatch):
    """slots 2 on the CPU (a core each), two units (vit at batch sizes 1 and 4), 2 rounds: every pair's two
    runners are placed in one slot and pinned to that slot's last core (which slot takes which unit is the
    queue's)."""
    backend = use_backend(monkeypatch, PairedBackend())
    data = {**small_matrix_data(), "turns": True, "turns_cores": 1, "repeats": 2, "slots": 2}
    run_matrix(load_matrix(write_matrix(tmp_path, data), Overrides(models=["vit"])),
               local_run_options(tmp_path, executor="slots"))
    assert len(backend.seen) == 8 and all(turns is not None for _, turns, _, _ in backend.seen)   # 2 units x 2 rounds
    by_pair = {}
    for request in backend.requests:
        slot = request.placement.slot
        by_pair.setdefault(request.work.turns.pair_id, []).append((slot.index, slot.cores, request.work.turns.cores))
    assert len(by_pair) == 4
    for sides in by_pair.values():
        assert len(sides) == 2 and sides[0] == sides[1]                         # one slot for both runners
        index, slot_cores_, pinned = sides[0]
        assert index in (0, 1) and len(slot_cores_) == 1 and pinned == slot_cores_


def test_run_dry_run_says_which_cores_a_pinned_pair_uses(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from matrixbench.cli import main

    use_backend(monkeypatch, RecordingBackend())
    matrix_file = write_matrix(tmp_path, {**small_matrix_data(), "turns": True, "turns_cores": 1})
    result = CliRunner().invoke(main, ["run", "--matrix", str(matrix_file), "--backend", "local", "--models", "vit",
                                       "--dry-run"])
    assert result.exit_code == 0, result.output
    core = usable_cores()[0][-1]
    assert f"in turns with latest, first, blocks pinned to cores {core})" in result.output
    too_many = write_matrix(tmp_path, {**small_matrix_data(), "turns": True, "turns_cores": 1024}, name="many.yaml")
    result = CliRunner().invoke(main, ["run", "--matrix", str(too_many), "--backend", "local", "--dry-run"])
    assert result.exit_code != 0 and "turns_cores: 1024: this run may use" in result.output
    if len(usable_cores()[0]) >= 2:   # in slots: each slot's last core, and a slot of one core is refused 2
        in_slots = ["run", "--matrix", str(matrix_file), "--backend", "local", "--models", "vit", "--dry-run",
                    "--executor", "slots", "--device", "cpu"]
        result = CliRunner().invoke(main, in_slots + ["--slots", "2"])
        assert result.exit_code == 0, result.output
        assert "in turns with latest, first, blocks pinned to the last 1 core(s) of its slot)" in result.output
        slots = len(usable_cores()[0])
        result = CliRunner().invoke(main, in_slots + ["--slots", str(slots), "--set", "turns_cores=2"])
        assert result.exit_code != 0 and re.search(r"turns_cores: 2: slot \d+ has 1 CPU core\(s\)", result.output)


def test_run_dry_run_under_ray_marks_the_pairs_and_pins_within_each_tasks_share_of_its_node(tmp_path):
    from click.testing import CliRunner

    from matrixbench.cli import main

    matrix_file = write_matrix(tmp_path, {**small_matrix_data(), "turns": True, "turns_cores": 1024})
    result = CliRunner().invoke(main, ["run", "--matrix", str(matrix_file), "--backend", "local", "--models", "vit",
                                       "--executor", "ray", "--device", "cpu", "--dry-run"])
    assert result.exit_code == 0, result.output   # the nodes' cores are checked as the run starts, not here
    assert "model by model" in result.output and "in turns (turns: true)" in result.output
    assert ("in turns with latest, first, blocks pinned to the last 1024 core(s) of its task's share of its node)"
            in result.output)


def test_a_pair_in_turns_is_one_launch_so_the_bill_counts_one_runner_start(tmp_path):
    """``launches``: what the bill counts as runner starts; a pair starts its two runners at once (one start on
    the wall clock), a run without turns or in units starts each runner of ``order``."""
    from matrixbench.executors.scheduler import run_order
    from matrixbench.executors.turns import launches

    matrix = turns_matrix(tmp_path)
    plans = [work(image, interleaved(CELLS, 3, seed=5)) for image in ("stable", "latest")]
    for units in (False, True):
        order = run_order(plans, units=units)
        assert len(order) == (12 if units else 6)   # in units: a runner per model, image and round
        assert len(launches(plans, matrix, units)) == len(order) // 2
        assert launches(plans, turns_matrix(tmp_path, turns=False), units) == order


def test_more_turns_cores_than_the_run_may_use_is_refused_before_anything_is_built(tmp_path):
    """check_options (the start of a run, before the images are built) refuses it, not the executor mid-run."""
    with pytest.raises(OptionConflictError, match="turns_cores: 1024: this run may use"):
        check_options(turns_matrix(tmp_path, turns_cores=1024), RunOptions())


def test_a_side_whose_runner_never_started_does_not_keep_its_partner_waiting(tmp_path):
    """take_turns: one side's launch fails at once (its container did not start); the other side's runner, waiting
    to meet it, goes on alone at the ended marker the host leaves, not after its timeout_s, and the error passes on."""
    from matrixbench.executors.turns import Side, TurnPair, take_turns
    from runner.cells_file import Turns as RunnerTurns
    from runner.turns import Session

    sessions = []

    def launch(side, turns):
        if side.role == "first":
            raise RuntimeError("the first side's container did not start")
        runner_turns = RunnerTurns(str(turns.folder), turns.role, turns.partner, turns.pair_id)
        started = time.monotonic()
        sessions.append((Session.connect(runner_turns.for_repeat("vit_bs1_eager_float32"), 120.0),
                         time.monotonic() - started))

    pair = TurnPair("p1", (Side("stable", [], "first", "latest"), Side("latest", [], "second", "stable")))
    with pytest.raises(RuntimeError, match="did not start"):
        take_turns(pair, tmp_path, (), launch, lambda: None)
    ((session, waited_s),) = sessions
    assert session.no_partner and "ended before it met" in session.lost
    assert waited_s < 30                                   # not its 120 s timeout_s
    assert not (tmp_path / ".turns" / "p1").exists()       # the pair's folder is removed once both ended


def test_a_killed_runs_ended_markers_do_not_part_a_pair_that_meets(tmp_path):
    """Markers a killed run left in the pair's folder are removed before its runners start: both sides meet."""
    from matrixbench.executors.turns import Side, TurnPair, take_turns
    from runner.cells_file import Turns as RunnerTurns
    from runner.turns import Session

    met = []

    def launch(side, turns):
        if side.role == "first":
            time.sleep(0.6)   # the second side dials a while: with the first's stale marker there, it would give up
        session = Session.connect(RunnerTurns(str(turns.folder), turns.role, turns.partner, turns.pair_id)
                                  .for_repeat("vit_bs1_eager_float32"), 60.0)
        met.append(session is not None and not session.no_partner)
        assert session is not None and session.baton is not None
        session.baton.close()

    folder = tmp_path / ".turns" / "p2"
    folder.mkdir(parents=True)
    for role in ("first", "second"):
        (folder / f"{role}.ended").touch()
    take_turns(TurnPair("p2", (Side("stable", [], "first", "latest"), Side("latest", [], "second", "stable"))),
               tmp_path, (), launch, lambda: None)
    assert met == [True, True]
