"""Runners at once, one per slot (a GPU and its share of the host's cores: ``matrixbench.run.placement``):
the pending repeats as units (``scheduler.make_units``: one model at one batch size in every image),
taken from one queue by one thread per slot (``executors.threads``); with ``--calibrate``, the slots'
interference calibration first (``executors.calibration``: its phases are units of the same scheduler,
each pinned to its slot). The runners share the run's timing board
(runner.timing_board), removed after. With ``turns``, a unit's image pairs run in its slot, two runners at once
taking turns (``executors.turns``: ``steps_of`` the unit), their blocks on the slot's last ``turns_cores`` cores."""
import shutil
from typing import Callable, Mapping, Optional

from matrixbench.environments.base import RunRequest
from matrixbench.errors import RunError
from matrixbench.executors import turns
from matrixbench.executors.base import Executor, Options, Run, gpu_choice
from matrixbench.executors.calibration import run_calibration
from matrixbench.executors.scheduler import Unit, make_units, run_on_slots
from matrixbench.executors.sequential import run_pair
from matrixbench.matrix import Matrix
from matrixbench.run import folder as run_folder
from matrixbench.run.pending import ImageWork
from matrixbench.run.placement import AUTO, NoHostGpusError, Slot, SlotPlan, check_gpus_free, chosen_gpus, plan_slots


class SlotsExecutor(Executor):
    def __init__(self, slot_plan: SlotPlan):
        self.slot_plan = slot_plan

    def run(self, run: Run) -> None:
        run.serialize_progress()
        progress, slots = run.progress, self.slot_plan.slots
        if run.matrix.calibrate and run.works:
            self._calibrate(run)
        run.start()
        board = run_folder.make_timing_board(run.path)
        pairs = turns.pairs_of(run.works, run.matrix) if run.matrix.turns else []
        cores = turns.slot_cores(run.matrix.turns_cores if pairs else 0, slots)

        def run_unit(slot: Slot, unit: Unit[ImageWork], busy: int) -> None:
            def place(request: RunRequest) -> RunRequest:
                return request.placed(slot, slots=len(slots), busy_units=busy, timing_board=board,
                                      exclusive_timing=run.matrix.exclusive_timing)

            for step in turns.steps_of(unit.parts, pairs) if pairs else unit.rounds():
                if isinstance(step, turns.TurnPair):   # both runners in this slot, their blocks on its last cores
                    run_pair(run, step, cores[slot.index], place, slot.index)
                else:
                    work, repeats = step
                    run.launch(work, place(run.request(work).for_repeats(repeats)), slot.index)
            progress.slot_running(slot.index)          # idle until its next unit

        torch_of = {name: image.torch_version for name, image in run.matrix.images.items()}
        try:
            run_on_slots(slots, make_units(run.works, torch_of), run_unit, run.environment.stop_all)
        finally:
            shutil.rmtree(board, ignore_errors=True)

    def _calibrate(self, run: Run) -> None:
        """The slots' interference calibration in the first image, its runners on a timing board of their
        own (never exclusive), so its records say how many other slots timed."""
        board = run_folder.make_timing_board(run.path)
        try:
            run_calibration(run, run.request(run.works[0]), self.slot_plan.slots, board)
        finally:
            shutil.rmtree(board, ignore_errors=True)


def gpus_placed(gpu: Optional[str], environ: Mapping[str, str]) -> int:
    """How many GPUs slots auto gives a slot each on a GPU run (the bill's runners at once): those --gpu (else
    CUDA_VISIBLE_DEVICES) chooses of the host's nvidia-smi list; 0 where it lists none or not those (``plan`` then
    runs one runner per image, or refuses the run)."""
    try:
        return len(chosen_gpus(gpu_choice(gpu, environ)))
    except RunError:
        return 0


def plan(matrix: Matrix, options: Options, gpus: bool, environ: Mapping[str, str], note: Callable[[str], None],
         required: bool = False) -> Optional[SlotPlan]:
    """The run's slots; None for one runner per image (slots auto on a CPU run, or on a GPU run whose
    host nvidia-smi lists no GPU to place, e.g. GPUs that only Docker sees), unless ``required``
    (--executor slots)."""
    if matrix.slots == AUTO and not gpus and not required:
        return None
    try:
        slot_plan = plan_slots(matrix.slots, gpus, gpu_choice(options.gpu, environ) if gpus else ())
    except NoHostGpusError:
        if matrix.slots != AUTO or required:
            raise
        note("slots auto: the host's nvidia-smi lists no GPU to place; one runner per image")
        return None
    if matrix.turns:
        turns.slot_cores(matrix.turns_cores, slot_plan.slots)   # refused before any cell runs
    note(slot_plan.describe())
    if gpus:
        check_gpus_free(slot_plan, allow=options.allow_busy_gpus, note=note)
    return slot_plan
