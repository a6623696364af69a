"""Progress for people: a bar on a terminal, one line per finished cell in a log."""
import dataclasses
import io

from click.testing import CliRunner

from host_helpers import RecordingBackend, make_record, use_backend, write_matrix
from matrixbench.cli import main
from matrixbench.progress import LineProgress, TqdmProgress, make_progress
from runner.core import Cell

CELL = Cell(model="vit", model_id=None, config_path=None, task="image-classification",
            weights="random", size="full", batch_size=1, mode="default", fullgraph=False, dtype="float32")
EAGER = dataclasses.replace(CELL, mode="eager")


class Terminal(io.StringIO):
    def isatty(self):
        return True


def _drive(progress):
    progress.start(2, 0)
    progress.tick()
    progress.cell_finished("stable", CELL, make_record(CELL))
    progress.tick()
    progress.cell_finished("stable", EAGER, make_record(EAGER, "oom"))
    progress.tick()
    progress.close()


def test_a_terminal_gets_the_bar_and_a_log_gets_lines():
    assert isinstance(make_progress(Terminal()), TqdmProgress)
    assert isinstance(make_progress(io.StringIO()), LineProgress)


def test_a_log_gets_one_line_per_finished_cell_and_no_redraws():
    stream = io.StringIO()
    _drive(make_progress(stream))
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and len(lines) == 2
    assert lines[0].startswith("[1/2] stable vit default bs=1: ok 2.50 ms, first call 3.0 s | elapsed ")
    assert "eta " in lines[0]
    assert lines[1].startswith("[2/2] stable vit eager bs=1: oom: RuntimeError: boom | elapsed ")


def test_a_terminal_keeps_the_redrawn_bar():
    stream = Terminal()
    _drive(make_progress(stream))
    assert "\r" in stream.getvalue() and "2/2 |" in stream.getvalue()


def test_matrixbench_run_into_a_log_writes_a_line_per_cell(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    use_backend(monkeypatch, RecordingBackend())
    result = CliRunner().invoke(main, ["run", "--matrix", str(write_matrix(tmp_path)), "--backend", "local",
                                       "--images", "stable"])
    assert result.exit_code == 0, result.output
    assert "\r" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("[")]) == 8
