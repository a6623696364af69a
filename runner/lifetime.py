"""A child process dies with its parent: ``PR_SET_PDEATHSIG`` (Linux, through ctypes; stdlib only).

The host's runner gets SIGTERM when the host dies (``kill -9`` included), so it unwinds like
Ctrl-C and kills its running cell; the runner's forkserver gets SIGKILL when the runner dies, even
while it still imports torch for its preload (``forkserver_dies_with_runner``: it would otherwise
notice only once the preload is done, seconds to minutes of CPU taken from the next run); a cell's
process gets SIGKILL when the forkserver it was forked from dies, or at once where that forkserver is already
gone when the cell's first line runs (``cell_dies_with_forkserver``). Where prctl is missing (not
Linux) nothing is set: the host's run lock still keeps a second run out while a runner lives.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from typing import Mapping, MutableMapping, Optional

PR_SET_PDEATHSIG = 1
# The runner's pid, in its environment when it starts its forkserver (which inherits it): the parent
# the forkserver's first preload module expects (runner.forkserver_lifetime).
FORKSERVER_PARENT_VARIABLE = "MATRIXBENCH_FORKSERVER_PARENT"
# In the runner's forkserver (set by its preload), and in every cell process forked from it: the forkserver's pid,
# the parent a cell process expects (``cell_dies_with_forkserver``).
_forkserver_pid: Optional[int] = None


def die_with_parent(sig: int = signal.SIGTERM, parent_pid: Optional[int] = None) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies; True where it could.

    ``parent_pid``: the parent expected; when the parent is already gone (it died before the
    request took effect), this process ends at once with ``sig``'s default.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        done = libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if done and parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)
    return done


def mark_forkserver_parent(environ: Optional[MutableMapping[str, str]] = None) -> None:
    """In the runner, before it starts (or restarts) its forkserver: name this process as the parent
    the forkserver must die with."""
    environ = os.environ if environ is None else environ
    environ[FORKSERVER_PARENT_VARIABLE] = str(os.getpid())


def forkserver_dies_with_runner(environ: Optional[Mapping[str, str]] = None) -> bool:
    """In the forkserver, first thing in its preload: SIGKILL when the runner that started it dies
    (a runner already gone ends it at once). Nothing where the runner named no parent (a forkserver
    that matrixbench's runner did not start)."""
    global _forkserver_pid
    environ = os.environ if environ is None else environ
    try:
        parent = int(environ.get(FORKSERVER_PARENT_VARIABLE, ""))
    except ValueError:
        return False
    _forkserver_pid = os.getpid()    # inherited by every cell process forked from here
    return die_with_parent(signal.SIGKILL, parent)


def cell_dies_with_forkserver() -> bool:
    """In a cell's process, first thing: SIGKILL when the forkserver it was forked from dies. A forkserver that
    died before the request took effect (killed with its runner while it forked this cell: on a loaded machine the
    child may run its first line long after the fork) ends it at once, where the forkserver is the runner's
    (``forkserver_dies_with_runner`` noted its pid); else the death signal alone."""
    return die_with_parent(signal.SIGKILL, _forkserver_pid)
