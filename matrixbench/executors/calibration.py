"""The slots' interference calibration (``--calibrate``, issue 15): the tool measures how much
running every slot at once slows a cell, instead of assuming it does not.

A small fixed set of cells (``calibration_models``, default resnet: ResNet-50, or its tiny variant
with ``size: tiny``; batch size 1; eager and default) runs in the run's first image, round by round
(one round per repeat): first on each slot alone (one slot busy), one slot after another, then on
every slot at once (all slots busy). Every record says its phase (``calibration: {phase, slots}``)
and its slot (``placement``); the report's calibration table divides loaded by alone per cell.

Records land apart from the matrix's, so resuming the matrix never mistakes one for the other:
``<run>/<image>/calibration/<phase>/slot-<i>/<cell_id>[.r<k>].json`` (the runner's input and log in
that folder's ``slot-<i>``). A round missing any record reruns whole (a loaded phase is only loaded
when every slot runs it); ``--force`` reruns every round. The compile caches are the calibration's
own (``<cache>/<image>/calibration/slot-<i>``), so the matrix's compile times are not warmed by it.
Its runners share a timing board (runner.timing_board; the base request's), never exclusive: each
record's ``placement.busy_slots`` says how many other slots were timing beside it.
"""
import dataclasses
import functools
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

from matrixbench.errors import MatrixError
from matrixbench.executors.threads import run_threads
from matrixbench.launch import Outcome, launch
from matrixbench.layout import CALIBRATION_DIRNAME, CALIBRATION_RUN_DEPTH, calibration_dir, slot_dir
from matrixbench.matrix import Model, make_cell
from matrixbench.pending import first_repeats
from runner.core import Cell, Mode
from runner.registry import SEED_MODELS
from runner.schema import needs_run, record_path

PHASES = ("alone", "loaded")
MODES = (Mode.EAGER.value, Mode.DEFAULT.value)
BATCH_SIZE = 1
FOLDER = CALIBRATION_DIRNAME
RUN_DEPTH = CALIBRATION_RUN_DEPTH   # (report.records finds a calibration record's run folder with it)


def calibration_cells(matrix) -> List[Cell]:
    """The calibration's cells: each of ``matrix.calibration_models`` at batch size 1, eager and
    default, in the matrix's size, first dtype, fullgraph and attention; a model the matrix lacks is
    taken from the shipped ones (random weights)."""
    return [make_cell(matrix, _model(matrix, name), matrix.dtypes[0], BATCH_SIZE, mode)
            for name in matrix.calibration_models for mode in MODES]


def _model(matrix, name) -> Model:
    if name in matrix.models:
        return matrix.models[name]
    spec = SEED_MODELS.get(name)
    if spec is None:
        valid = sorted(set(matrix.models) | set(SEED_MODELS))
        raise MatrixError(f"--calibration-models: unknown model {name!r}; valid: {', '.join(valid)}")
    return Model(name=name, task=spec.task, weights="random", model_id=spec.model_id)


def out_dir(image_dir, phase: str, slot) -> Path:
    """Where one phase's records of one slot land."""
    return calibration_dir(image_dir, phase, slot.index)


def pending_rounds(image_dir, cells, slots, repeats: int, force: bool = False) -> List[int]:
    """The rounds (repeat indices) missing a record in some phase on some slot (all with ``force``)."""
    return [index for index in range(repeats)
            if any(needs_run(out_dir(image_dir, phase, slot), cell, force, repeat=index)
                   for phase in PHASES for slot in slots for cell in cells)]


def phase_request(base, cells, index: int, phase: str, slot, slots: int):
    """``base`` (the image's RunRequest) narrowed to one round of one phase on one slot."""
    cache = slot_dir(base.cache_dir / FOLDER, slot.index) if base.cache_dir is not None else None
    return dataclasses.replace(
        base, cells=list(cells), schedule=tuple((cell, index) for cell in range(len(cells))),
        out_dir=out_dir(base.out_dir, phase, slot), slot=slot, slots=slots,
        busy_units=1 if phase == "alone" else slots, cache_dir=cache, exclusive_timing=False,
        calibration={"phase": phase, "slots": slots})


def run_calibration(matrix, base, slots: Sequence, backend, note: Callable[[str], None] = print,
                    force: bool = False) -> Dict[str, Any]:
    """Run the calibration's pending rounds through ``backend`` on ``slots`` (base: the first image's
    RunRequest). Runners that end without every record are noted, not raised: the matrix still runs.
    Returns what ran: {"rounds": [...], "missing": [record paths]}."""
    if len(slots) < 2:
        note("--calibrate: one slot, nothing runs beside it, nothing to calibrate (use --slots N, N >= 2)")
        return {"rounds": [], "missing": []}
    cells = calibration_cells(matrix)
    rounds = pending_rounds(base.out_dir, cells, slots, first_repeats(matrix), force)
    note(f"calibration: {len(rounds)} of {first_repeats(matrix)} round(s) to run in {base.image_name}: "
         f"{', '.join(f'{c.model} {c.mode}' for c in cells)}, on each of {len(slots)} slots alone, then on all at once")
    missing: List[str] = []
    for index in rounds:
        for slot in slots:
            missing += _run_phase(backend, [phase_request(base, cells, index, "alone", slot, len(slots))])
        missing += _run_phase(backend, [phase_request(base, cells, index, "loaded", slot, len(slots))
                                        for slot in slots])
        note(f"calibration: round {index + 1} of {first_repeats(matrix)} done")
    if missing:
        note(f"calibration: {len(missing)} record(s) missing (see the runner.log beside them): {', '.join(missing)}")
    return {"rounds": rounds, "missing": missing}


def _run_phase(backend, requests) -> List[str]:
    """Run ``requests`` at once (one thread each); the record paths they left missing."""
    outcomes: Dict[int, Outcome] = {}

    def work(index, stopping):
        outcomes[index] = launch(backend, requests[index])

    run_threads([functools.partial(work, index) for index in range(len(requests))], backend.stop_all,
                [f"calibration-slot-{request.slot.index}" for request in requests])
    return [str(record_path(request.out_dir, r.cell, r.index))
            for index, request in enumerate(requests) for r in outcomes[index].missing]
