"""Progress for people: a bar on a terminal, one line per finished cell in a log."""
import dataclasses
import io

from click.testing import CliRunner

from host_helpers import RecordingBackend, make_record, use_backend, write_matrix
from matrixbench.cli import main
from matrixbench.run.progress import LineProgress, TqdmProgress, make_progress
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


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _slot_record(cell, slot):
    record = make_record(cell)
    record.placement = {"slot": slot, "cores": [slot], "affinity": [slot]}
    return record


def test_one_display_for_every_slot_counts_all_cells_and_shows_each_slots_cell():
    clock, stream = FakeClock(), io.StringIO()
    progress = LineProgress(stream, clock=clock)
    progress.start(4, 0)
    progress.slot_running(0, "stable", CELL)
    clock.now += 5
    progress.slot_running(1, "latest", EAGER)
    clock.now += 60
    assert progress.state.describe() == (
        "0/4 cells | elapsed 1m05s | eta -- | slot 0: stable vit default bs=1 (1m05s); "
        "slot 1: latest vit eager bs=1 (1m00s)")
    progress.cell_finished("latest", EAGER, _slot_record(EAGER, 1))
    progress.slot_running(1, "latest", CELL)             # the slot's next cell: its clock restarts
    progress.slot_running(0, "stable", CELL)             # the same cell again: its clock goes on
    clock.now += 10
    assert stream.getvalue() == ("[1/4] slot 1 latest vit eager bs=1: ok 2.50 ms, first call 3.0 s | "
                                 "elapsed 1m05s eta 3m15s\n")
    assert progress.state.describe() == (
        "1/4 cells | elapsed 1m15s | eta 3m45s | last: latest vit eager bs=1: ok 2.50 ms on cpu | "
        "slot 0: stable vit default bs=1 (1m15s); slot 1: latest vit default bs=1 (10s)")
    progress.slot_running(1)
    assert progress.state.describe().endswith("slot 1: idle")


def test_a_terminal_gets_a_status_line_per_slot():
    stream = Terminal()
    progress = TqdmProgress(stream, clock=FakeClock())
    progress.start(2, 0)
    progress.slot_running(0, "stable", CELL)
    progress.slot_running(1, "latest", EAGER)
    progress.cell_finished("latest", EAGER, _slot_record(EAGER, 1))
    progress.slot_running(1)
    progress.close()
    text = stream.getvalue()
    assert "slot 0: stable vit default bs=1 (0s)" in text and "slot 1: idle" in text
    assert "[1/2] slot 1 stable vit" not in text and "[1/2] slot 1 latest vit eager bs=1: ok" in text
