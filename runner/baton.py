"""Two processes taking turns: the baton for measuring two processes' blocks alternately (stdlib only).

Paired blocks inside one process (runner.cell.paired_blocks) cancel the host's state out of a speed-up, because
eager and compiled blocks run seconds apart on the same host. An image change (torch 2.0.1 against 2.1) cannot
share a process: its two sides are two interpreters, often two containers. They can share the time, though: two
processes alive at once, each timing a block only while the other waits, alternate A B A B as the blocks of one
process do. Whether that cancels the host's state depends on where the state lives: in the host (a noisy
neighbour, the hypervisor; both processes see it) or in each process (its memory, the cores it got). That is what
``benchmarks/bench_cross_process.py`` measures; this module is its mechanism.

The turn passes over a Unix socket in a folder both processes can reach (a bind mount works between
containers on one host): the ``first`` side listens on ``<folder>/baton.sock`` and starts with the turn; the
``second`` connects. ``wait`` blocks until the other side passes the turn, at most ``timeout_s``; a partner that
closed the socket or went silent raises ``BatonLost``, so a process whose partner died goes on alone and says so.
A waiting process sleeps in ``recv``: it takes no CPU from the one timing.

A partner whose runner ended (its container never started, it crashed before its cell, it had no such cell) never
comes: the host that started both says so in a file, ``ended_marker`` (``<pair folder>/<role>.ended``), which a side
waiting to meet its partner looks for every ``POLL_S``, so it goes on alone at once instead of after ``timeout_s``.
"""
import os
import socket
import time
from pathlib import Path
from typing import Iterator, Optional

SOCKET_NAME = "baton.sock"
MAX_ADDRESS = 100      # bytes: a Unix socket address (sun_path) holds 108 with its terminating zero
TOKEN = b"T"
ROLES = ("first", "second")
POLL_S = 0.25          # how often a side waiting to meet its partner looks for the partner's ended marker


def partner_of(role: str) -> str:
    """The other side's role."""
    return ROLES[1 - ROLES.index(role)]


def ended_marker(pair_folder: Path, role: str) -> Path:
    """The file the host writes once ``role``'s runner of the pair at ``pair_folder`` ended: the side waiting to
    meet it stops waiting (matrixbench.executors.turns.take_turns writes it; each repeat's baton is a folder below)."""
    return Path(pair_folder) / f"{role}.ended"


class BatonLost(RuntimeError):
    """The partner closed the socket or passed no turn within the timeout."""


class Baton:
    """One side of a two-process turn. ``first`` holds the turn at the start."""

    def __init__(self, folder: Path, role: str, timeout_s: float = 120.0, partner_ended: Optional[Path] = None):
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, not {role!r}")
        self.role, self.timeout_s = role, timeout_s
        self.partner_ended = partner_ended    # a file whose presence says the partner will not come (ended_marker)
        self.path = Path(folder) / SOCKET_NAME
        self.turns = 0          # turns passed to the partner
        self._conn: Optional[socket.socket] = None

    def connect(self) -> "Baton":
        """Meet the partner (within ``timeout_s``)."""
        folder = os.open(self.path.parent, os.O_RDONLY)
        try:
            self._conn = self._listen(self._address(folder)) if self.role == "first" else \
                self._dial(self._address(folder))
        finally:
            os.close(folder)
        self._conn.settimeout(self.timeout_s)
        return self

    def _address(self, folder: int) -> str:
        """The socket's address: its path, or where that passes a Unix socket address's limit (about 100 bytes)
        the same file through the open folder (Linux's /proc/self/fd), without changing this process's cwd."""
        path = str(self.path)
        return path if len(path.encode()) < MAX_ADDRESS else f"/proc/self/fd/{folder}/{SOCKET_NAME}"

    def _listen(self, address: str) -> socket.socket:
        if self.path.exists() or self.path.is_symlink():
            self.path.unlink()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(address)
            server.listen(1)
            deadline = time.monotonic() + self.timeout_s
            while True:
                server.settimeout(max(0.0, min(POLL_S, deadline - time.monotonic())))
                try:
                    conn, _ = server.accept()
                    return conn
                except socket.timeout as exc:
                    self._check_partner_ended()
                    if time.monotonic() >= deadline:
                        raise BatonLost(f"no partner connected within {self.timeout_s:.0f} s") from exc
        finally:
            server.close()

    def _check_partner_ended(self) -> None:
        """BatonLost once the host said the partner's runner ended (``partner_ended``): it will not come."""
        if self.partner_ended is not None and self.partner_ended.exists():
            raise BatonLost("the partner's runner ended before it met this one")

    def _dial(self, address: str) -> socket.socket:
        deadline = time.monotonic() + self.timeout_s
        while True:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(address)
                return conn
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                conn.close()
                self._check_partner_ended()
                if time.monotonic() > deadline:
                    raise BatonLost(f"no partner listening within {self.timeout_s:.0f} s") from exc
                time.sleep(0.05)

    def wait(self) -> None:
        """Block until the partner passes the turn."""
        assert self._conn is not None, "connect() first"
        try:
            got = self._conn.recv(1)
        except socket.timeout as exc:
            raise BatonLost(f"the partner passed no turn within {self.timeout_s:.0f} s") from exc
        except OSError as exc:          # a partner killed with a turn unread resets the connection
            raise BatonLost(f"the partner closed the baton ({exc})") from exc
        if got != TOKEN:
            raise BatonLost("the partner closed the baton")

    def give(self) -> None:
        """Pass the turn to the partner."""
        assert self._conn is not None, "connect() first"
        try:
            self._conn.sendall(TOKEN)
        except OSError as exc:
            raise BatonLost(f"the partner is gone: {exc}") from exc
        self.turns += 1

    def take(self, total: int) -> Iterator[int]:
        """This side's turns of ``total`` alternating ones (``first`` has 0, 2, 4...; ``second`` 1, 3...): yields
        each of its turn's index once it holds the turn, and passes the turn on when the loop body is done (after
        every turn but the last of all)."""
        for index in range(ROLES.index(self.role), total, 2):
            if index:
                self.wait()
            yield index
            if index < total - 1:
                self.give()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self.role == "first":
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass

    def __enter__(self) -> "Baton":
        return self.connect()

    def __exit__(self, *exc) -> None:
        self.close()
