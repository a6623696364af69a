"""One runner at a time: each image's pending repeats, round by round across the images
(``scheduler.rounds``: repeat 0 in every image, then repeat 1, ...; one runner per image when each
cell runs once)."""
from matrixbench.executors.base import Executor, Run
from matrixbench.executors.calibration import say_nothing_to_calibrate
from matrixbench.executors.scheduler import run_order


class SequentialExecutor(Executor):
    def run(self, run: Run) -> None:
        if run.matrix.calibrate and run.works:
            say_nothing_to_calibrate(run.progress.note)
        if run.matrix.exclusive_timing:
            run.progress.note("exclusive_timing: this run has no slots (one runner at a time), so every "
                              "cell is timed alone anyway")
        run.start()
        for work, repeats in run_order(run.works, units=False):
            run.launch(work, run.request(work).for_repeats(repeats))
