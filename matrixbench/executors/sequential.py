"""One runner at a time: each image's pending repeats, round by round across the images
(``scheduler.rounds``: repeat 0 in every image, then repeat 1, ...; one runner per image when each
cell runs once). With ``turns`` the two runners of an image comparison's pair start at once and take
turns (``executors.turns``): one pair, or one runner, at a time."""
from typing import Callable, Optional, Tuple

from matrixbench.environments.base import RunRequest, Turns
from matrixbench.executors import turns
from matrixbench.executors.base import Executor, Run
from matrixbench.executors.calibration import say_nothing_to_calibrate
from matrixbench.executors.scheduler import run_order
from matrixbench.run.pending import ImageWork


class SequentialExecutor(Executor):
    def run(self, run: Run) -> None:
        if run.matrix.calibrate and run.works:
            say_nothing_to_calibrate(run.progress.note)
        if run.matrix.exclusive_timing:
            run.progress.note("exclusive_timing: this run has no slots (one runner at a time), so every "
                              "cell is timed alone anyway")
        if run.matrix.turns:
            run.serialize_progress()   # a pair's two runners report from two threads
        run.start()
        if not run.matrix.turns:
            for work, repeats in run_order(run.works, units=False):
                run.launch(work, run.request(work).for_repeats(repeats))
            return
        cores = turns.pinned_cores(run.matrix.turns_cores)
        for step in turns.steps(run.works, turns.pairs_of(run.works, run.matrix)):
            if isinstance(step, turns.TurnPair):
                run_pair(run, step, cores)
            else:
                work, repeats = step
                run.launch(work, run.request(work).for_repeats(repeats))


def run_pair(run: Run, pair: turns.TurnPair[ImageWork], cores: Tuple[int, ...] = (),
             place: Callable[[RunRequest], RunRequest] = lambda request: request, slot: Optional[int] = None) -> None:
    """Both runners of ``pair`` at once (``turns.take_turns``: a thread each, the baton folder
    ``<run>/.turns/<pair_id>``, removed once both are done); their blocks pinned to ``cores`` (if any); in
    slot ``slot`` (the slots executor), both requests ``place``d there."""

    def launch(side: turns.Side[ImageWork], in_turns: Turns) -> None:
        request = place(run.request(side.work).for_repeats(side.repeats))
        run.launch(side.work, request.in_turns(in_turns), slot)

    turns.take_turns(pair, run.path, cores, launch, run.environment.stop_all)
