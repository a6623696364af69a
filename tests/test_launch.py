"""matrixbench.run.launch: one request -> one runner -> one Outcome, judged in one place; and the one
thread runner (executors.threads) the executors share."""
import dataclasses
import threading

import pytest

from host_helpers import make_record
from matrixbench.environments.base import ImageRef, Paths, RunRequest, Work
from matrixbench.executors.threads import run_in_thread, run_threads
from matrixbench.run.launch import LaunchStatus, judge, launch
from matrixbench.run.layout import LOG_FILENAME
from runner.core import Cell
from runner.schema import CHECK_FILENAME, write_record

CELL = Cell(model="vit", model_id=None, config_path=None, task="image-classification",
            weights="random", size="tiny", batch_size=1, mode="eager", fullgraph=False, dtype="float32")
CELLS = [CELL, dataclasses.replace(CELL, mode="default")]


def request_for(tmp_path, check=False):
    return RunRequest(ImageRef("stable"), Work(CELLS, {}, check=check), Paths(tmp_path / "stable"),
                      env={"HF_TOKEN": "hf_secretvalue"})


class Environment:
    """Writes records for the first ``writes`` repeats and a log line naming the secret, then exits."""

    def __init__(self, writes, exit_code):
        self.writes, self.exit_code = writes, exit_code

    def run(self, request):
        request.work_dir().mkdir(parents=True, exist_ok=True)
        (request.work_dir() / LOG_FILENAME).write_text("loading\nSegmentation fault, token hf_secretvalue\n")
        for repeat in request.repeats()[:self.writes]:
            write_record(request.paths.out_dir, make_record(repeat.cell))
        return self.exit_code


def test_every_record_written_is_complete_whatever_the_exit_code(tmp_path):
    seen = []
    outcome = launch(Environment(2, exit_code=1), request_for(tmp_path), lambda cell, record: seen.append(cell))
    assert outcome.status is LaunchStatus.COMPLETE and outcome.exit_code == 1 and outcome.missing == ()
    assert sorted(cell.mode for cell in seen) == ["default", "eager"]


def test_a_runner_that_dies_is_incomplete_with_what_it_left_and_its_log_redacted(tmp_path):
    request = request_for(tmp_path)
    outcome = launch(Environment(1, exit_code=139), request)
    assert outcome.status is LaunchStatus.INCOMPLETE and outcome.exit_code == 139
    assert [repeat.cell for repeat in outcome.missing] == CELLS[1:]
    assert "Segmentation fault, token ***" in outcome.log_tail and "hf_secretvalue" not in outcome.log_tail
    assert "exited with code 139" in outcome.describe(request) and "1 of 2 do" in outcome.describe(request)


def test_a_check_is_complete_only_with_exit_0_and_its_answer(tmp_path):
    request = request_for(tmp_path, check=True)
    request.paths.out_dir.mkdir(parents=True)
    assert judge(request, 0).status is LaunchStatus.INCOMPLETE
    (request.paths.out_dir / CHECK_FILENAME).write_text("{}")
    assert judge(request, 0).complete and not judge(request, 1).complete


def test_the_first_error_stops_new_work_and_is_raised_after_every_thread_ended():
    started, release = [], threading.Event()

    def failing(stopping):
        raise ValueError("boom")

    def patient(stopping):
        started.append("patient")
        stopping.wait(30)          # the stop signal reaches the other threads
        started.append("stopped" if stopping.is_set() else "timed out")

    with pytest.raises(ValueError, match="boom"):
        run_threads([failing, patient], release.set, ["a", "b"])
    assert started == ["patient", "stopped"]


def test_run_in_thread_hands_back_the_value_or_the_error():
    assert run_in_thread(lambda: 7, lambda: None, "one") == 7
    with pytest.raises(ValueError):
        run_in_thread(lambda: int("x"), lambda: None, "one")
