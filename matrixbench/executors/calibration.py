"""The slots' interference calibration (``--calibrate``, issue 15): the tool measures how much
running every slot at once slows a cell, instead of assuming it does not.

A small fixed set of cells (``calibration_models``, default resnet: ResNet-50, or its tiny variant
with ``size: tiny``; batch size 1; eager and default) runs in the run's first image, round by round
(one round per repeat): first on each slot alone (one slot busy), one slot after another, then on
every slot at once (all slots busy). Each phase on each slot is an ordinary unit of the slots'
scheduler (``executors.scheduler``), pinned to its slot, launched and judged as every unit is
(``Run.launch``). Every record says its phase (``calibration: {phase, slots}``)
and its slot (``placement``); the report's calibration table divides loaded by alone per cell.

Records land apart from the matrix's, so resuming the matrix never mistakes one for the other:
``<run>/<image>/calibration/<phase>/slot-<i>/<cell_id>[.r<k>].json`` (the runner's input and log in
that folder's ``slot-<i>``). A round missing any record reruns whole (a loaded phase is only loaded
when every slot runs it); ``--force`` reruns every round. The compile caches are the calibration's
own (``<cache>/<image>/calibration/slot-<i>``), so the matrix's compile times are not warmed by it.
Its runners share a timing board of their own (runner.timing_board; ``board``), never exclusive: each
record's ``placement.busy_slots`` says how many other slots were timing beside it.
"""
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Union

from matrixbench.environments.base import Paths, RunRequest
from matrixbench.errors import MatrixError
from matrixbench.executors.base import Run
from matrixbench.executors.scheduler import Unit, run_on_slots
from matrixbench.matrix import Matrix, Model, make_cell
from matrixbench.run.layout import CALIBRATION_DIRNAME, CALIBRATION_RUN_DEPTH, calibration_dir
from matrixbench.run.pending import first_repeats
from matrixbench.run.placement import Slot
from runner.core import Cell, Mode, Repeat
from runner.registry import SEED_MODELS
from runner.schema import needs_run, record_path

PHASES = ("alone", "loaded")
MODES = (Mode.EAGER.value, Mode.DEFAULT.value)
BATCH_SIZE = 1
FOLDER = CALIBRATION_DIRNAME
RUN_DEPTH = CALIBRATION_RUN_DEPTH   # (report.records finds a calibration record's run folder with it)


def calibration_cells(matrix: Matrix) -> List[Cell]:
    """The calibration's cells: each of ``matrix.calibration_models`` at batch size 1, eager and
    default, in the matrix's size, first dtype, fullgraph and attention; a model the matrix lacks is
    taken from the shipped ones (random weights)."""
    return [make_cell(matrix, _model(matrix, name), matrix.dtypes[0], BATCH_SIZE, mode)
            for name in matrix.calibration_models for mode in MODES]


def _model(matrix: Matrix, name: str) -> Model:
    if name in matrix.models:
        return matrix.models[name]
    spec = SEED_MODELS.get(name)
    if spec is None:
        valid = sorted(set(matrix.models) | set(SEED_MODELS))
        raise MatrixError(f"--calibration-models: unknown model {name!r}; valid: {', '.join(valid)}")
    return Model(name=name, task=spec.task, weights="random", model_id=spec.model_id)


def out_dir(image_dir: Union[str, Path], phase: str, slot: Slot) -> Path:
    """Where one phase's records of one slot land."""
    return calibration_dir(image_dir, phase, slot.index)


def pending_rounds(image_dir: Union[str, Path], cells: Sequence[Cell], slots: Sequence[Slot], repeats: int,
                   force: bool = False) -> List[int]:
    """The rounds (repeat indices) missing a record in some phase on some slot (all with ``force``)."""
    return [index for index in range(repeats)
            if any(needs_run(out_dir(image_dir, phase, slot), cell, force, repeat=index)
                   for phase in PHASES for slot in slots for cell in cells)]


def phase_request(base: RunRequest, repeats: Sequence[Repeat], phase: str, slot: Slot, slots: int,
                  board: Optional[Path] = None) -> RunRequest:
    """``base`` (the image's RunRequest) narrowed to one round's ``repeats`` of one phase on one slot, in
    the calibration's folders, on the calibration's timing board ``board`` (never exclusive)."""
    paths = Paths(out_dir(base.paths.out_dir, phase, slot), hf_cache_dir=base.paths.hf_cache_dir,
                  cache_dir=None if base.paths.cache_dir is None else base.paths.cache_dir / FOLDER)
    return base.for_repeats(repeats).relocated(paths, base.env).placed(
        slot, slots=slots, busy_units=1 if phase == "alone" else slots, timing_board=board,
        calibration={"phase": phase, "slots": slots})


@dataclass(frozen=True)
class Phase:
    """One round of one calibration phase in one image: a calibration unit's part (``scheduler.Unit.parts``:
    its "work"), named for the progress display."""

    label: str        # "stable calibration"
    name: str         # "alone" or "loaded"
    index: int        # the round (repeat index)


def phase_unit(phase: Phase, cells: Sequence[Cell], slot: Slot) -> Unit[Phase]:
    """One round of one phase on one slot, as a unit of the slots' scheduler pinned to that slot."""
    return Unit(f"calibration {phase.name}", BATCH_SIZE, [(phase, [Repeat(cell, phase.index) for cell in cells])],
                0.0, slot=slot.index)


def say_nothing_to_calibrate(note: Callable[[str], None]) -> None:
    note("--calibrate: one slot, nothing runs beside it, nothing to calibrate (use --slots N, N >= 2)")


def run_calibration(run: Run, base: RunRequest, slots: Sequence[Slot],
                    board: Optional[Path] = None) -> Dict[str, object]:
    """Run the calibration's pending rounds of ``base`` (the first image's RunRequest) on ``slots``, as units
    of the slots' scheduler (``scheduler.run_on_slots``): per round, each slot's "alone" unit by itself, one
    after another, then one "loaded" unit per slot at once; each runner through ``run.launch`` (not counted
    among the matrix's cells), on the timing board ``board``. Runners that end without every record are
    noted, not raised: the matrix still runs. Returns what ran: {"rounds": [...], "missing": [record paths]}."""
    matrix, note = run.matrix, run.progress.note
    if len(slots) < 2:
        say_nothing_to_calibrate(note)
        return {"rounds": [], "missing": []}
    cells = calibration_cells(matrix)
    rounds = pending_rounds(base.paths.out_dir, cells, slots, first_repeats(matrix), run.options.force)
    note(f"calibration: {len(rounds)} of {first_repeats(matrix)} round(s) to run in {base.image.name}: "
         f"{', '.join(f'{c.model} {c.mode}' for c in cells)}, on each of {len(slots)} slots alone, then on all at once")
    missing: List[str] = []

    def run_unit(slot: Slot, unit: Unit[Phase], busy: int) -> None:
        for phase, repeats in unit.parts:
            request = phase_request(base, repeats, phase.name, slot, len(slots), board)
            outcome = run.launch(phase, request, slot.index, counted=False)
            missing.extend(str(record_path(request.paths.out_dir, r.cell, r.index)) for r in outcome.missing)
        run.progress.slot_running(slot.index)          # idle until its next unit

    label = f"{base.image.name} calibration"
    for index in rounds:
        for slot in slots:
            run_on_slots(slots, [phase_unit(Phase(label, "alone", index), cells, slot)], run_unit,
                         run.environment.stop_all)
        run_on_slots(slots, [phase_unit(Phase(label, "loaded", index), cells, slot) for slot in slots], run_unit,
                     run.environment.stop_all)
        note(f"calibration: round {index + 1} of {first_repeats(matrix)} done")
    if missing:
        note(f"calibration: {len(missing)} record(s) missing (see the runner.log beside them): {', '.join(missing)}")
    return {"rounds": rounds, "missing": missing}
