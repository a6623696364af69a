"""A cell's process taking turns with another image's process of the same cell (issue 34, docs/turns.md).

Both runners of a pair run the same repeats in the same order, at the same time; each repeat's two processes
meet over a baton (runner.baton) in ``<turns folder>/<repeat stem>`` and take ``2 + 2 * TURN_BLOCKS`` turns:
turn 0 / 1 is each side's whole own part (everything the cell does alone: build, compile, warm-up, timed loop,
accuracy, paired blocks), then TURN_BLOCKS blocks of the cell's step a side, alternately (A B A B ...), each
timed with the timed loop's per-call timer (runner.timing.time_iterations) and no warm-up between turns, so that
what the host does to the processes falls on both sides of each block pair. The record's ``timing.turns``.

With ``cores`` in the cells file's turns (matrix setting ``turns_cores``), each side pins every thread of its
process to those cores, and sets as many torch threads, right before its blocks (``pin``): both sides' blocks then
run on the same cores, whatever the scheduler would have done; the own part (the compile uses every core) is
left unpinned. The record says the cores read back, the threads and why a pin failed (the blocks then run unpinned).
In a slot (the slots executor puts a pair in one slot) each block is timed inside the timing board's mark, as a
timed loop is: the other slots see it, and exclusive timing times it alone.

A lost baton (the partner never came, died, failed its own part, or went silent) never costs the own
measurement: the cell goes on alone and ``lost`` says why; the blocks measured so far stay. A side whose own
part failed closes the baton at once, so the partner does not wait ``timeout_s`` for it. Stdlib only (torch
comes in through the step).
"""
from __future__ import annotations

import contextlib
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional, Sequence

from runner.baton import Baton, BatonLost, ended_marker, partner_of
from runner.cells_file import Turns
from runner.timing import time_iterations

JSON = Dict[str, Any]
TURN_BLOCKS = 10     # blocks a side, after the own parts
NO_PARTNER = "no partner"   # the start of ``lost`` when the partner never connected (the driver stops turns)
OWN_PART_FAILED = "its own part failed"
Threads = Callable[[Optional[int]], int]   # sets the torch threads to a count (None: leaves them); returns them


def pin(cores: Sequence[int]) -> List[int]:
    """Pin every thread of this process (``/proc/self/task``: torch's OpenMP pool too; threads started later
    inherit the calling thread's) to ``cores``; returns the process's affinity read back, sorted. Raises OSError
    (or AttributeError where the platform has no affinity) when the cores cannot be had."""
    wanted, before = set(cores), os.sched_getaffinity(0)
    os.sched_setaffinity(0, wanted)
    try:
        for task in Path("/proc/self/task").iterdir():
            try:
                os.sched_setaffinity(int(task.name), wanted)
            except ProcessLookupError:   # a thread that ended meanwhile
                pass
    except OSError:   # no /proc: the calling thread alone would be pinned, so none is
        os.sched_setaffinity(0, before)
        raise
    return sorted(os.sched_getaffinity(0))


def block_calls(iterations: int) -> int:
    """Calls of the step in one block."""
    return max(1, iterations // TURN_BLOCKS)


class Session:
    """One repeat's turns: ``connect`` before building anything, ``own_turn`` before the own part, ``blocks``
    after it; ``record()`` is the record's ``timing.turns``."""

    def __init__(self, turns: Turns, timeout_s: float):
        self.turns = turns          # its folder already the repeat's (Turns.for_repeat)
        self.baton: Optional[Baton] = _baton(turns, timeout_s)
        self._turns: Optional[Iterator[int]] = None
        self.lost: Optional[str] = None
        self.no_partner = False     # the partner never connected
        self.block_ms: List[float] = []
        self.block_median_ms: List[float] = []
        self.calls = 1
        self.waited_s = 0.0         # in the baton: for the partner to come, for each of this side's turns
        self.cores: Optional[List[int]] = None     # pinned to, read back (None: not pinned)
        self.threads: Optional[int] = None          # torch threads during the blocks
        self.pin_error: Optional[str] = None

    @classmethod
    def connect(cls, turns: Optional[Turns], timeout_s: float) -> Optional["Session"]:
        """Meet the partner (at most ``timeout_s``); None without turns. A partner that never came is no error:
        the session is lost, and the cell runs alone."""
        if turns is None:
            return None
        session = cls(turns, timeout_s)
        Path(turns.folder).mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        try:
            assert session.baton is not None
            session.baton.connect()
        except BatonLost as exc:
            session.no_partner = True
            session._lose(f"{NO_PARTNER}: {exc}")
        session.waited_s += time.monotonic() - started
        return session

    def own_turn(self) -> None:
        """Wait for this side's first turn (the second side waits for the first's own part)."""
        if self.baton is None:
            return
        self._turns = self.baton.take(2 + 2 * TURN_BLOCKS)
        started = time.monotonic()
        try:
            next(self._turns)
        except BatonLost as exc:
            self._lose(str(exc))
        self.waited_s += time.monotonic() - started

    def blocks(self, step: Optional[Callable[[], Any]], own_ok: bool, iterations: int, device: str,
               time_loop: Callable[..., Any] = time_iterations, threads: Optional[Threads] = None,
               timing: Callable[[], ContextManager[Any]] = contextlib.nullcontext) -> None:
        """This side's blocks of ``step`` (the cell's step, compiled for compiled cells), each in its turn, pinned
        first where the turns have cores (``threads``: the torch threads' setter), each block inside ``timing()``
        (in a slot: runner.timing_board's timing mark, so that other slots see it and exclusive timing holds); a
        failed own part (``own_ok`` false, or no step) closes the baton at once instead."""
        self.calls = block_calls(iterations)
        if self.baton is None or self._turns is None:
            return
        if not own_ok or step is None:
            return self._lose(OWN_PART_FAILED)
        self._pin(threads)
        waiting = time.monotonic()
        try:
            for _ in self._turns:
                self.waited_s += time.monotonic() - waiting
                with timing():
                    block = time_loop(step, self.calls, device)
                self.block_ms.append(statistics.fmean(block.samples_ms))
                self.block_median_ms.append(statistics.median(block.samples_ms))
                block = None
                waiting = time.monotonic()
        except BatonLost as exc:
            self.waited_s += time.monotonic() - waiting
            return self._lose(str(exc))
        except Exception as exc:    # a block that failed: the own measurement stands, the turns stop
            return self._lose(f"a block failed: {type(exc).__name__}: {exc}")
        self.close()

    def _pin(self, threads: Optional[Threads]) -> None:
        """Pin to the turns' cores with one torch thread a core (none: only the threads are read)."""
        count = None
        if self.turns.cores:
            try:
                self.cores = pin(self.turns.cores)
                count = len(self.cores)
            except (OSError, AttributeError) as exc:   # the blocks run unpinned, and the record says why
                self.pin_error = f"{type(exc).__name__}: {exc}"
        self.threads = threads(count) if threads is not None else None

    def _lose(self, why: str) -> None:
        self.lost = self.lost or why
        self.close()

    def close(self) -> None:
        self._turns = None      # a generator left at its yield: dropping it passes no turn
        if self.baton is not None:
            self.baton.close()
            self.baton = None

    def record(self) -> JSON:
        """The record's ``timing.turns`` (runner.schema RECORD_SCHEMA)."""
        return {"role": self.turns.role, "partner": self.turns.partner, "pair_id": self.turns.pair_id,
                "blocks": TURN_BLOCKS, "block_calls": self.calls, "block_ms": list(self.block_ms),
                "block_median_ms": list(self.block_median_ms), "lost": self.lost,
                "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "waited_s": self.waited_s,
                "cores": self.cores, "threads": self.threads, "pin_error": self.pin_error}


def release(turns: Turns, timeout_s: float) -> bool:
    """The baton of a repeat this runner failed without a process: meet the partner (at most ``timeout_s``) and
    close at once, so that it goes on alone instead of waiting its ``timeout_s``. False when no partner came."""
    Path(turns.folder).mkdir(parents=True, exist_ok=True)
    baton = _baton(turns, timeout_s)
    try:
        baton.connect()
    except BatonLost:
        return False
    finally:
        baton.close()
    return True


def _baton(turns: Turns, timeout_s: float) -> Baton:
    """One repeat's baton (its folder below the pair's: Turns.for_repeat), which stops waiting to meet the partner
    once the host says the partner's runner ended (runner.baton.ended_marker, in the pair's folder)."""
    folder = Path(turns.folder)
    return Baton(folder, turns.role, timeout_s=timeout_s,
                 partner_ended=ended_marker(folder.parent, partner_of(turns.role)))
