"""Injected failures, for tests only: never part of a cell, a record or the runner's flags.

A test sets ``MATRIXBENCH_TEST_FAULTS`` to a JSON object, cell id -> fault name, e.g.
``{"resnet-tiny_bs1_eager_float32": "crash"}``. The runner's parent process reads it only when
it is set (``fault_for``) and hands the fault to the cell's process in its job; the cell
injects it where real failures happen, at its first (compiling) call: oom raises torch's OOM
error, error raises an exception, crash kills the process with SIGSEGV, hang sleeps until the
parent's time limit, full_disk fills the filesystem of the cell's output folder (a hidden file there,
``FILLER``), so that its record meets a full disk. The key ``FORKSERVER`` instead of a cell id
injects its fault into the forkserver's preload ("hang": a start-up that never ends, as a slow
preload on a loaded machine lasts minutes). Stdlib at import: torch is imported only to raise its OOM error.
"""
from __future__ import annotations

import json
import os
import signal
import time
from typing import Mapping, Optional

FAULTS_VARIABLE = "MATRIXBENCH_TEST_FAULTS"
FAULTS = ("oom", "error", "crash", "hang", "full_disk")
FILLER = ".injected-full-disk"
FORKSERVER = "(forkserver)"   # a key that is no cell id: the fault of the forkserver's preload


class InjectedError(RuntimeError):
    """The exception a cell with fault "error" raises."""


def fault_for(cell_id: str, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The fault a test asked for this cell, or None (always None when the variable is unset)."""
    environ = os.environ if environ is None else environ
    text = environ.get(FAULTS_VARIABLE)
    if not text:
        return None
    faults = json.loads(text)
    fault = faults.get(cell_id)
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"{FAULTS_VARIABLE}: unknown fault {fault!r} for {cell_id}; valid: {', '.join(FAULTS)}")
    return fault if isinstance(fault, str) else None


def inject_in_forkserver(environ: Optional[Mapping[str, str]] = None) -> None:
    """In the forkserver's preload: the fault a test asked for under ``FORKSERVER``, if any."""
    inject(fault_for(FORKSERVER, environ))


def inject(fault: Optional[str], out_dir: Optional[str] = None) -> None:
    if fault is None:
        return
    if fault == "full_disk" and out_dir:
        return _fill(os.path.join(out_dir, FILLER))
    if fault == "oom":
        raise _out_of_memory("CUDA out of memory. Tried to allocate 1.00 TiB (injected by fault 'oom')")
    if fault == "error":
        raise InjectedError("injected by fault 'error'")
    if fault == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if fault == "hang":
        while True:
            time.sleep(60)
    raise ValueError(f"unknown fault {fault!r}; valid: {', '.join(FAULTS)}")


def _fill(path: str) -> None:
    """Write ``path`` until its filesystem has no byte left (ENOSPC), in ever smaller pieces."""
    with open(path, "ab", buffering=0) as handle:
        for size in (1 << 20, 1 << 16, 1 << 12, 1):
            try:
                while True:
                    handle.write(b"\0" * size)
            except OSError:
                continue


def _out_of_memory(message: str) -> BaseException:
    import torch

    error_class = getattr(torch.cuda, "OutOfMemoryError", RuntimeError)
    return error_class(message)
