"""The timing board (runner.timing_board) with real fcntl locks held by other processes: a slot
timing is seen by the others, and with exclusive timing no two slots time at once while compiles
share the board."""
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runner import records, timing_board
from runner.cell import run_cell
from runner.core import Status
from runner.timing_board import BOARD_ENV, Board, BoardError
from runner_cells import assert_valid, settings, tiny_cell

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# A slot in another process: takes the phase asked for ("timing" or "preparing"), says when it
# holds it and when it lets go (monotonic clock: one time base for every process), and holds it
# until its stdin closes or HOLD_S passes.
HOLDER = textwrap.dedent("""\
    import sys, time
    sys.path.insert(0, {root!r})
    from runner import timing_board
    board = timing_board.Board({dir!r}, {slot}, exclusive={exclusive})
    phase = getattr(timing_board, {phase!r})
    print("asking", time.monotonic(), flush=True)
    with phase(board):
        print("held", time.monotonic(), flush=True)
        if {hold_s} > 0:
            time.sleep({hold_s})
        else:
            sys.stdin.read()
        released = time.monotonic()
    print("released", released, flush=True)
""")


def holder(board_dir, slot, phase="timing", exclusive=False, hold_s=0.0):
    """Start a holder process; return it once it holds its phase (and the time it got it)."""
    code = HOLDER.format(root=str(PROJECT_ROOT), dir=str(board_dir), slot=slot, exclusive=exclusive,
                         phase=phase, hold_s=hold_s)
    process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    return process


def asking(process):
    word, _ = process.stdout.readline().split()
    assert word == "asking"


def held_at(process):
    word, stamp = process.stdout.readline().split()
    if word == "asking":
        word, stamp = process.stdout.readline().split()
    assert word == "held"
    return float(stamp)


def finish(process):
    process.stdin.close()
    out = process.stdout.read().split()
    process.stdout.close()
    assert process.wait(timeout=30) == 0
    return float(out[out.index("released") + 1])


def kill(process):
    process.kill()
    process.wait()
    process.stdin.close()
    process.stdout.close()


def test_a_slot_timing_in_another_process_is_counted_until_it_lets_go(tmp_path):
    me = Board(str(tmp_path), 0)
    assert me.others_timing() == 0
    first, second = holder(tmp_path, 1), holder(tmp_path, 2)
    held_at(first), held_at(second)
    assert me.others_timing() == 2
    assert Board(str(tmp_path), 1).others_timing() == 1          # a slot never counts itself
    finish(first)
    assert me.others_timing() == 1                               # its mark file stays, unlocked
    kill(second)                                                 # a killed cell leaves no mark
    assert me.others_timing() == 0


def test_seen_keeps_the_most_other_slots_at_the_loop_start_and_end(tmp_path):
    board = Board(str(tmp_path), 0)
    other = holder(tmp_path, 3)
    held_at(other)
    with timing_board.timing(board) as seen:
        seen.look()
        finish(other)
        seen.look()
    assert seen.counts == [1, 0] and seen.most == 1
    placement = {"slot": 0}
    timing_board.annotate(placement, board, seen)
    assert placement == {"slot": 0, "busy_slots": 1, "timing": "concurrent"}


def test_a_slot_timing_alone_on_an_exclusive_board_says_so_in_its_placement(tmp_path):
    """What the real two-slot run with --exclusive-timing (test_slots, slow) checks of each record, without models:
    the board's lock held, no other slot seen timing, the placement's timing "exclusive"."""
    board = Board(str(tmp_path), 0, exclusive=True)
    with timing_board.timing(board) as seen:
        seen.look()
        seen.look()
    placement = {"slot": 0}
    timing_board.annotate(placement, board, seen)
    assert placement == {"slot": 0, "busy_slots": 0, "timing": "exclusive"}


def test_exclusive_timing_times_one_slot_at_a_time(tmp_path):
    """Slot 1 times (exclusive); slot 2 asks to time meanwhile: it gets the board only once slot 1
    lets go (without the exclusive board lock it would hold at once, as in the test below)."""
    first = holder(tmp_path, 1, exclusive=True)
    held_at(first)
    second = holder(tmp_path, 2, exclusive=True, hold_s=0.1)
    asking(second)
    time.sleep(0.5)                                       # the second waits on the board meanwhile
    first_released = finish(first)
    assert held_at(second) >= first_released
    finish(second)


def test_concurrent_timing_overlaps(tmp_path):
    """The control of the test above: without --exclusive-timing slot 2 times while slot 1 does."""
    first = holder(tmp_path, 1, exclusive=False)
    held_at(first)
    second = holder(tmp_path, 2, exclusive=False)
    second_held = held_at(second)                         # while the first still holds: no wait
    assert Board(str(tmp_path), 0).others_timing() == 2
    assert second_held < finish(first)
    finish(second)


def test_exclusive_compiles_share_the_board_and_a_timer_waits_for_them(tmp_path):
    compiling = [holder(tmp_path, slot, phase="preparing", exclusive=True) for slot in (1, 2)]
    for process in compiling:
        held_at(process)                                  # both compile at once: shared
    board = Board(str(tmp_path), 0, exclusive=True)
    timer = holder(tmp_path, 0, exclusive=True, hold_s=0.1)
    asking(timer)
    time.sleep(0.5)                                       # the timer waits on the board meanwhile
    released = [finish(process) for process in compiling]
    started = held_at(timer)
    assert started >= max(released)                       # timed only once no slot compiled
    finish(timer)
    assert board.mode == "exclusive"


def test_an_unknown_board_version_is_refused():
    assert timing_board.from_env({}) is None
    board = Board("/tmp/board", 2, exclusive=True)
    assert timing_board.from_env({BOARD_ENV: board.to_env()}) == board
    with pytest.raises(BoardError, match="version 9 is not supported"):
        timing_board.from_env({BOARD_ENV: json.dumps({"version": 9, "dir": "/x", "slot": 0})})


def test_a_cell_records_the_other_slots_timing_during_its_loop(tmp_path, monkeypatch):
    """run_cell of a real tiny model while another process holds slot 1's timing mark."""
    placement = {"slot": 0, "cores": [0], "gpu_index": None, "gpu_uuid": None, "numa_node": None,
                 "slots": 2, "busy_units": 2}
    monkeypatch.setenv(records.PLACEMENT_ENV, json.dumps(placement))
    monkeypatch.setenv(BOARD_ENV, Board(str(tmp_path), 0).to_env())
    other = holder(tmp_path, 1)
    held_at(other)
    try:
        record = run_cell(_job(tiny_cell("resnet")))
    finally:
        finish(other)
    assert record.status is Status.OK, record.error
    assert record.placement["busy_slots"] == 1 and record.placement["timing"] == "concurrent"
    assert_valid(record)


def _job(cell):
    from runner.environment import collect_environment

    return {"cell": cell, "settings": settings(iterations=3), "device": "cpu", "fault": None,
            "environment": collect_environment("test-image", "sha256:0"), "precision": {},
            "started_at": records.utc_now(), "start_clock": records.clock()}
