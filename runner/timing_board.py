"""The timing board: which slots of a run are timing right now (issue 15). Stdlib only (os, fcntl).

The host makes one folder per run (``<run>/.timing-board/``), mounts it into every container
(local and venv runners get the host path) and names it, with the runner's slot, in one
environment variable, ``MATRIXBENCH_TIMING_BOARD``: JSON ``{"version": 1, "dir": ..., "slot": i,
"exclusive": false}``; an unknown version is refused.

- While its warm-up and timed loop run, a slot's cell process holds an exclusive flock on
  ``slot-<i>.timing``. Another slot counts it as timing when a non-blocking shared flock on that
  file fails. A flock dies with its process: a killed or crashed cell never leaves a slot marked.
  ``busy_slots`` in the record is the most other slots seen timing at the start and at the end
  of the timed loop.
- ``exclusive`` (``--exclusive-timing``): building, the eager reference, compiling and the first
  call hold a shared flock on ``board.lock``; warm-up and the timed loop an exclusive one. So
  slots compile in parallel and time one at a time. Either is taken through ``turnstile.lock``
  (held only while waiting), so a slot waiting to time is not starved by others' new compiles.
  The wait counts against the cell's ``timeout_s``.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass, field
from typing import IO, Iterator, List, Mapping, Optional

BOARD_ENV = "MATRIXBENCH_TIMING_BOARD"
BOARD_VERSION = 1
BOARD_LOCK = "board.lock"
TURNSTILE = "turnstile.lock"
MARK_SUFFIX = ".timing"


class BoardError(ValueError):
    """The board the host named cannot be used (unknown version, not JSON)."""


@dataclass(frozen=True)
class Board:
    """One runner's view of its run's timing board."""

    dir: str
    slot: int
    exclusive: bool = False

    @property
    def mode(self) -> str:
        """What the record says: "exclusive" (timed alone) or "concurrent"."""
        return "exclusive" if self.exclusive else "concurrent"

    def to_env(self) -> str:
        return json.dumps({"version": BOARD_VERSION, "dir": self.dir, "slot": self.slot,
                           "exclusive": self.exclusive}, sort_keys=True)

    def mark_path(self, slot: int) -> str:
        return os.path.join(self.dir, f"slot-{slot}{MARK_SUFFIX}")

    def others_timing(self) -> int:
        """How many other slots hold their timing mark now."""
        try:
            names = os.listdir(self.dir)
        except OSError:
            return 0
        own = os.path.basename(self.mark_path(self.slot))
        return sum(_held(os.path.join(self.dir, name)) for name in names
                   if name.endswith(MARK_SUFFIX) and name != own)


def from_env(environ: Optional[Mapping[str, str]] = None) -> Optional[Board]:
    """The board ``MATRIXBENCH_TIMING_BOARD`` names; None when unset (no slots)."""
    text = (os.environ if environ is None else environ).get(BOARD_ENV)
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BoardError(f"{BOARD_ENV} is not JSON ({exc}): {text[:200]!r}") from exc
    if not isinstance(data, dict) or data.get("version") != BOARD_VERSION:
        version = data.get("version") if isinstance(data, dict) else None
        raise BoardError(f"{BOARD_ENV} version {version!r} is not supported; this runner reads "
                         f"version {BOARD_VERSION}. Use the same matrixbench on the host and in the image.")
    return Board(str(data["dir"]), int(data["slot"]), bool(data.get("exclusive", False)))


def _held(path: str) -> bool:
    """Whether another process holds an exclusive flock on ``path``."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)      # closing drops the shared lock when it was taken
    return False


@contextlib.contextmanager
def _flock(path: str, operation: int) -> Iterator[IO[bytes]]:
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), operation)
        try:
            yield handle
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def _board_lock(board: Board, operation: int) -> Iterator[None]:
    """``board.lock`` with ``operation``, taken while holding the turnstile."""
    with contextlib.ExitStack() as stack:
        with _flock(os.path.join(board.dir, TURNSTILE), fcntl.LOCK_EX):
            stack.enter_context(_flock(os.path.join(board.dir, BOARD_LOCK), operation))
        yield


@contextlib.contextmanager
def preparing(board: Optional[Board]) -> Iterator[None]:
    """Around build, reference, compile and first call: a shared board lock when exclusive."""
    if board is None or not board.exclusive:
        yield
        return
    with _board_lock(board, fcntl.LOCK_SH):
        yield


@dataclass
class Seen:
    """Other slots seen timing at the look-ups of one timed loop."""

    counts: List[int] = field(default_factory=list)
    board: Optional[Board] = None

    def look(self) -> None:
        if self.board is not None:
            self.counts.append(self.board.others_timing())

    @property
    def most(self) -> Optional[int]:
        return max(self.counts) if self.counts else None


@contextlib.contextmanager
def timing(board: Optional[Board]) -> Iterator[Seen]:
    """Around warm-up and the timed loop: this slot's timing mark (and, when exclusive, the
    board lock exclusively). ``Seen.look()`` at the loop's start and end counts the others."""
    if board is None:
        yield Seen()
        return
    with contextlib.ExitStack() as stack:
        if board.exclusive:
            stack.enter_context(_board_lock(board, fcntl.LOCK_EX))
        stack.enter_context(_flock(board.mark_path(board.slot), fcntl.LOCK_EX))
        yield Seen(board=board)


def annotate(placement: Optional[dict], board: Optional[Board], seen: Seen) -> None:
    """The record's placement block gets ``busy_slots`` (the most other slots seen timing) and
    ``timing`` (exclusive or concurrent); nothing without a board or a placement."""
    if board is None or placement is None:
        return
    placement["busy_slots"] = seen.most
    placement["timing"] = board.mode
