"""Injected failures, for tests: a cell's ``fault`` makes it fail the way real cells do.

Injected where real failures happen, at the cell's first (compiling) call:
oom raises torch's OOM error, error raises an exception, crash kills the process
with SIGSEGV, hang sleeps until the parent's time limit.
"""
import os
import signal
import time

import torch


class InjectedError(RuntimeError):
    """The exception a cell with fault "error" raises."""


def inject(fault):
    if fault is None:
        return
    if fault == "oom":
        raise _out_of_memory("CUDA out of memory. Tried to allocate 1.00 TiB (injected by fault 'oom')")
    if fault == "error":
        raise InjectedError("injected by fault 'error'")
    if fault == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if fault == "hang":
        while True:
            time.sleep(60)
    raise ValueError(f"unknown fault {fault!r}; valid: oom, error, crash, hang")


def _out_of_memory(message):
    error_class = getattr(torch.cuda, "OutOfMemoryError", RuntimeError)
    return error_class(message)
