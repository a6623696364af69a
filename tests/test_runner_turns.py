"""runner.turns: two real runners of the same cell take turns over a baton (issue 34); a partner that fails, or
never comes, costs the other side neither its record nor timeout_s; the cells file's ``turns`` and the record's
``timing.turns`` (schema v5; a v4 record still reads)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.cells_file import CellsFile, CellsFileError, Turns, cells_file_from_dict, load_cells_file
from runner.core import SCHEMA_VERSION
from runner.driver import Context, Pairing, run_one
from runner.faults import FAULTS_VARIABLE
from runner.isolation import Outcome
from runner.schema import CELLS_SCHEMA_VERSION, read_record, record_path
from runner.turns import NO_PARTNER, TURN_BLOCKS, Session
from runner_cells import assert_valid, settings, tiny_cell

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 60
CELL = tiny_cell()


def cells(role, folder, partner, cores=None, iterations=20):
    """A cells file of one tiny eager cell in turns (pinned to ``cores`` if given)."""
    turns = {"folder": str(folder), "role": role, "partner": partner, "pair_id": "pair-1"}
    return {"schema_version": CELLS_SCHEMA_VERSION, "image_name": role,
            "settings": settings(iterations=iterations, warmup=2, timeout_s=TIMEOUT_S, paired=False),
            "cells": [CELL.to_dict()],
            "turns": dict(turns, cores=cores) if cores is not None else turns}


def runner(tmp_path, role, folder, fault=None, cores=None, iterations=20):
    """``python -m runner`` of one side; ``fault`` (runner.faults) for this side's cell only."""
    path = tmp_path / f"{role}.json"
    path.write_text(json.dumps(cells(role, folder, "second" if role == "first" else "first", cores, iterations)))
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")  # a waiting side's OpenMP threads spin
    env.pop(FAULTS_VARIABLE, None)
    if fault:
        env[FAULTS_VARIABLE] = json.dumps({CELL.id: fault})
    return subprocess.Popen([sys.executable, "-m", "runner", "--cells", str(path), "--out", str(tmp_path / role)],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def both(tmp_path, faults=None, cores=None, iterations=20):
    """Both sides at once; their records (as read) and stderr."""
    faults = faults or {}
    folder = tmp_path / "turns"
    procs = {role: runner(tmp_path, role, folder, faults.get(role), cores, iterations) for role in ("first", "second")}
    logs = {role: proc.communicate(timeout=4 * TIMEOUT_S)[1] for role, proc in procs.items()}
    assert all(proc.returncode == 0 for proc in procs.values()), logs
    return {role: read_record(record_path(tmp_path / role, CELL)) for role in procs}, logs


def test_two_runners_of_a_cell_take_turns(tmp_path):
    records, logs = both(tmp_path)
    for role, partner in (("first", "second"), ("second", "first")):
        record = records[role]
        assert record["status"] == "ok", logs[role]
        assert record["schema_version"] == SCHEMA_VERSION == 5
        turns = record["timing"]["turns"]
        assert (turns["role"], turns["partner"], turns["pair_id"], turns["lost"]) == (role, partner, "pair-1", None)
        assert turns["blocks"] == TURN_BLOCKS and turns["block_calls"] == 20 // TURN_BLOCKS
        assert len(turns["block_ms"]) == len(turns["block_median_ms"]) == TURN_BLOCKS
        assert all(ms > 0 for ms in turns["block_ms"])
        assert turns["waited_s"] > 0 and turns["waited_s"] < record["duration_s"]   # the partner's turns, timed
        assert (turns["cores"], turns["threads"], turns["pin_error"]) == (None, 1, None)   # not pinned
        assert_valid(record)
    assert (tmp_path / "turns" / CELL.id).is_dir() and not (tmp_path / "turns" / CELL.id / "baton.sock").exists()


def test_a_pinned_pair_runs_its_blocks_on_the_cores_asked_with_a_torch_thread_each(tmp_path):
    """``turns.cores``: both sides' blocks run pinned to the same core (the last this test may use), one torch
    thread; the record reads the affinity back."""
    core = sorted(os.sched_getaffinity(0))[-1]
    records, logs = both(tmp_path, cores=[core])
    for role in ("first", "second"):
        turns = records[role]["timing"]["turns"]
        assert records[role]["status"] == "ok" and turns["lost"] is None, logs[role]
        assert (turns["cores"], turns["threads"], turns["pin_error"]) == ([core], 1, None)
        assert len(turns["block_ms"]) == TURN_BLOCKS
        assert_valid(records[role])


PIN_SCRIPT = """
import json, os, sys, threading
from pathlib import Path
from runner.turns import pin
stop = threading.Event()
workers = [threading.Thread(target=stop.wait) for _ in range(3)]
for worker in workers:
    worker.start()
core = int(sys.argv[1])
got = pin([core])
later = threading.Thread(target=stop.wait)
later.start()
allowed = {task.name: [line.split(":")[1].strip() for line in (task / "status").read_text().splitlines()
                       if line.startswith("Cpus_allowed_list")][0] for task in Path("/proc/self/task").iterdir()}
stop.set()
print(json.dumps({"got": got, "allowed": allowed}))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_pin_moves_every_thread_of_the_process_and_those_started_later(tmp_path):
    """runner.turns.pin pins the threads already running (torch's OpenMP pool, in a runner), not only the caller,
    and a thread started afterwards inherits it (in a process of its own: pinning this one would pin the tests)."""
    core = sorted(os.sched_getaffinity(0))[-1]
    out = subprocess.run([sys.executable, "-c", PIN_SCRIPT, str(core)], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60, check=True).stdout
    result = json.loads(out)
    assert result["got"] == [core]
    assert len(result["allowed"]) == 5 and set(result["allowed"].values()) == {str(core)}, result


def test_a_pin_that_fails_is_recorded_and_the_blocks_run_unpinned(tmp_path):
    """Cores this process may not use: the blocks run all the same, unpinned, and the record says why (never
    claiming cores it did not run on)."""
    before = os.sched_getaffinity(0)
    session = Session(Turns(str(tmp_path / "t"), "first", "nightly", "k", cores=(100000,)), timeout_s=5)
    session._turns = iter(range(3))     # this side's turns, without a partner (the baton is not used)
    session.blocks(lambda: None, True, 20, "cpu", threads=lambda count: 7 if count is None else count)
    record = session.record()
    assert record["cores"] is None and record["threads"] == 7 and "OSError" in record["pin_error"]
    assert len(record["block_ms"]) == 3 and os.sched_getaffinity(0) == before


def test_a_bad_cores_list_is_refused_naming_the_field(tmp_path):
    base = {key: value for key, value in cells("first", tmp_path, "second").items() if key != "schema_version"}
    for bad in ([-1], [1, 1], ["1"], 3, [True]):
        with pytest.raises(CellsFileError, match="turns.cores"):
            cells_file_from_dict(dict(base, turns=dict(base["turns"], cores=bad)))
    assert cells_file_from_dict(dict(base, turns=dict(base["turns"], cores=[3, 0]))).turns.cores == (3, 0)


def test_a_partner_whose_own_part_fails_costs_neither_the_record_nor_the_timeout(tmp_path):
    """The first side's cell fails (its first call raises): it closes the baton at once, and the second, waiting
    for its own turn, measures alone without waiting timeout_s."""
    records, logs = both(tmp_path, {"first": "error"})
    failed, alone = records["first"], records["second"]
    assert failed["status"] == "error" and failed["timing"] is None
    assert alone["status"] == "ok", logs["second"]
    turns = alone["timing"]["turns"]
    assert turns["lost"] and "closed" in turns["lost"] and turns["block_ms"] == []
    assert alone["timing"]["n"] == 20
    assert alone["duration_s"] < TIMEOUT_S * 0.75     # it never waited for the partner's timeout
    assert_valid(alone)


def test_no_partner_is_lost_not_an_error(tmp_path):
    turns = Turns(str(tmp_path / "alone"), "first", "nightly", "k")
    started = time.monotonic()
    session = Session.connect(turns, timeout_s=0.3)
    assert session is not None and session.no_partner and session.lost.startswith(NO_PARTNER)
    session.own_turn()
    session.blocks(lambda: None, True, 20, "cpu")
    assert session.record()["block_ms"] == [] and time.monotonic() - started < 10
    assert Session.connect(None, 1.0) is None


class Launcher:
    """A launcher whose probe fails or whose cell's partner never came; it records the cell's time limit."""

    def __init__(self, reply):
        self.reply, self.limits = reply, []

    def run(self, function_name, args, timeout_s):
        self.limits.append(timeout_s)
        return Outcome(exitcode=0, timed_out=False, messages=[self.reply])


def _driver_case(tmp_path, context, reply):
    cells_file = cells_file_from_dict({key: value for key, value in cells("second", tmp_path / "t", "stable").items()
                                       if key != "schema_version"})
    cells_file.settings["timeout_s"] = 0.3
    lines = []
    pairing = Pairing(cells_file.turns, lines.append)
    launcher = Launcher(reply)
    run_one(launcher, CELL, cells_file, context, tmp_path / "out", repeat=2, pairing=pairing)
    return pairing, launcher, lines


def test_the_driver_doubles_a_cell_in_turns_limit_and_stops_turns_after_no_partner(tmp_path):
    context = Context(device="cpu", environment={"torch": "x", "transformers": "y"}, precision={})
    pairing, launcher, lines = _driver_case(tmp_path, context, {"record_written": False, "no_partner": True})
    assert launcher.limits == [2 * 0.3]
    assert pairing.turns is None and "never met" in lines[0]


def test_a_repeat_failed_without_a_process_releases_its_baton(tmp_path):
    """A probe error: no process, so the driver meets the partner in the repeat's folder and closes at once."""
    context = Context(device="cpu", environment={"torch": "x", "transformers": "y"}, precision={}, error="no GPU")
    folder = tmp_path / "t" / f"{CELL.id}.r2"
    folder.mkdir(parents=True)
    started = time.monotonic()
    pairing, launcher, lines = _driver_case(tmp_path, context, {})       # no partner here: the release times out
    assert launcher.limits == [] and pairing.turns is None and time.monotonic() - started < 10
    assert read_record(record_path(tmp_path / "out", CELL, 2))["status"] == "error"


def test_cells_file_turns_read_and_a_bad_role_is_refused_naming_the_field(tmp_path):
    path = tmp_path / "cells.json"
    path.write_text(json.dumps(cells("first", "/turns", "nightly")))
    loaded = load_cells_file(path)
    assert loaded.turns == Turns("/turns", "first", "nightly", "pair-1")
    assert loaded.turns.for_repeat("x.r1").folder == "/turns/x.r1"
    assert CellsFile(settings={}, cells=[CELL]).turns is None
    bad = cells("third", "/turns", "nightly")
    path.write_text(json.dumps(bad))
    with pytest.raises(CellsFileError, match=r"'turns.role' must be one of \['first', 'second'\], got 'third'"):
        load_cells_file(path)
    bad["turns"] = {"folder": "/turns", "role": "first", "partner": "nightly"}
    path.write_text(json.dumps(bad))
    with pytest.raises(CellsFileError, match=r"'turns' has unknown keys \[\] / lacks \['pair_id'\]"):
        load_cells_file(path)


def test_a_v4_record_still_reads_without_turns(tmp_path):
    from runner import records
    from runner.core import Status

    job = {"cell": CELL, "device": "cpu", "precision": {}, "settings": settings(), "environment": {},
           "started_at": "2026-01-01T00:00:00Z", "start_clock": records.clock()}
    record = records.finish(records.new_record(job), job)
    record.status, record.timing = Status.OK, {"mean_ms": 1.0}
    data = dict(record.to_dict(), schema_version=4)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    read = read_record(path)
    assert read["schema_version"] == 5 and read["timing"].get("turns") is None


def test_each_block_is_timed_inside_the_timing_context_one_side_at_a_time(tmp_path):
    """``Session.blocks``' ``timing`` (runner.cell passes the timing board's mark: in a slot the other slots see
    the blocks, and exclusive timing times them alone): every block is inside it, and the two sides' never overlap.
    Two sessions in two threads of this process, over a real baton."""
    import contextlib
    import threading

    events, lock = [], threading.Lock()

    def side(role):
        @contextlib.contextmanager
        def timing():
            with lock:
                events.append((role, "in"))
            yield
            with lock:
                events.append((role, "out"))

        turns = Turns(str(tmp_path / "baton"), role, "other", "pair-1")
        session = Session.connect(turns, timeout_s=TIMEOUT_S)
        session.own_turn()
        session.blocks(lambda: time.sleep(0.001), True, 20, "cpu", timing=timing)
        assert session.lost is None and len(session.block_ms) == TURN_BLOCKS

    threads = [threading.Thread(target=side, args=(role,)) for role in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=4 * TIMEOUT_S)
    assert len(events) == 4 * TURN_BLOCKS
    inside = 0
    for _, what in events:            # in, out, in, out, ...: one side's block at a time
        inside += 1 if what == "in" else -1
        assert inside in (0, 1)
    assert [role for role, what in events if what == "in"] == ["first", "second"] * TURN_BLOCKS


def test_a_pair_in_one_slot_under_exclusive_timing_takes_its_turns_and_its_blocks_hold_the_slots_mark(tmp_path,
                                                                                                       monkeypatch):
    """The slots executor puts both runners of a pair in one slot: under --exclusive-timing each block takes the
    board's exclusive lock and the slot's timing mark, one side at a time (the baton), and the pair never waits
    on itself. A watcher on another slot's board sees slot 0 timing in the blocks' phase (200 iterations: blocks
    of 20 calls, 20 of them, well after the own loops' timing marks are gone)."""
    import threading

    from runner.timing_board import BOARD_ENV, Board

    board = tmp_path / "board"
    board.mkdir()
    monkeypatch.setenv(BOARD_ENV, Board(str(board), 0, exclusive=True).to_env())   # both runners inherit it
    watcher, stop, seen = Board(str(board), 1), threading.Event(), []

    def watch():
        while not stop.is_set():
            seen.append((time.time(), watcher.others_timing()))
            time.sleep(0.002)

    thread = threading.Thread(target=watch)
    thread.start()
    try:
        records, logs = both(tmp_path, iterations=200)
    finally:
        stop.set()
        thread.join()
    last_own_end = max(records[role]["timing"]["windows"]["timed"][1] for role in records)
    for role in ("first", "second"):
        turns = records[role]["timing"]["turns"]
        assert records[role]["status"] == "ok" and turns["lost"] is None, logs[role]
        assert len(turns["block_ms"]) == TURN_BLOCKS
    blocks_s = sum(sum(records[role]["timing"]["turns"]["block_ms"]) * 20 / 1000 for role in records)
    assert blocks_s > 0.2, blocks_s
    assert any(count == 1 for at, count in seen if at > last_own_end + 0.1)   # slot 0 timing after both own loops


def test_an_unreadable_timing_board_fails_the_cell_not_the_pair(tmp_path, monkeypatch):
    """The board is read once, inside the cell's failure handling: a board variable this runner cannot read fails
    each side's record with the reason, and the pair still ends (no second read outside it to crash on)."""
    from runner.timing_board import BOARD_ENV
    monkeypatch.setenv(BOARD_ENV, json.dumps({"version": 9, "dir": str(tmp_path), "slot": 0}))   # both inherit it
    records, logs = both(tmp_path)
    for role in ("first", "second"):
        record = records[role]
        assert record["status"] == "error", logs[role]
        assert BOARD_ENV in record["error"]["message"] and "version 9" in record["error"]["message"]
        assert record["timing"] is None
