"""A child process dies with its parent: ``PR_SET_PDEATHSIG`` (Linux, through ctypes; stdlib only).

The host's runner gets SIGTERM when the host dies (``kill -9`` included), so it unwinds like
Ctrl-C and kills its running cell; a cell's process gets SIGKILL when the forkserver it was
forked from dies (the forkserver ends when the runner does). Where prctl is missing (not Linux)
nothing is set: the host's run lock still keeps a second run out while a runner lives.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from typing import Optional

PR_SET_PDEATHSIG = 1


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
