"""Each cell in a fresh process, forked from a preloaded forkserver; timeouts and crashes.

Importing torch and transformers takes seconds, more than a cell's whole fixed-cost
budget. So the run starts multiprocessing's forkserver once, which imports
``runner.worker`` (torch, transformers, the runner) and then forks one fresh child per
cell: no dynamo cache, CUDA context or CUDA-graph pool survives from one cell to the next.
The forkserver is a new interpreter that never runs torch code, so it holds no CUDA
context and no thread pools when it forks; it dies with this process, its preload included
(runner.forkserver_lifetime). This parent process stays stdlib-only.

A child leads its own process group; the parent waits for it up to the time limit,
then kills the whole group (Inductor's compile workers included).
"""
from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any, List, Optional, Tuple

from runner.core import Status
from runner.lifetime import cell_dies_with_forkserver, mark_forkserver_parent

# runner.forkserver_lifetime first: the forkserver dies with the runner even while it imports the rest
PRELOAD = ["runner.forkserver_lifetime", "runner.worker"]
SIGNAL_CHECK_S = 0.5


@dataclass
class Outcome:
    """How a child process ended, and the messages it sent."""

    exitcode: Optional[int]  # negative for a signal; None if it never exited (killed)
    timed_out: bool
    messages: List[Any] = field(default_factory=list)

    @property
    def reply(self) -> Any:
        return self.messages[-1] if self.messages else None

    def failure(self) -> Optional[Tuple[Status, str]]:
        """Why the child failed as (status, message), or None if it ended normally."""
        if self.timed_out:
            return Status.TIMEOUT, "the cell's process was still running at the time limit and was killed"
        if self.exitcode is not None and self.exitcode < 0:
            return Status.CRASHED, f"the cell's process was killed by signal {_signal_name(-self.exitcode)}"
        if self.exitcode != 0:
            return Status.CRASHED, f"the cell's process exited with code {self.exitcode}"
        if self.reply is None:
            return Status.CRASHED, "the cell's process exited without reporting"
        return None


class Launcher:
    """Runs functions of ``runner.worker`` in fresh processes forked from the forkserver."""

    def __init__(self):
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(PRELOAD)

    def start(self):
        """Start the forkserver now (imports torch once), rather than at the first cell."""
        from multiprocessing import forkserver

        mark_forkserver_parent()
        forkserver.ensure_running()

    def run(self, function_name, args, timeout_s):
        """Call ``runner.worker.<function_name>(*args, channel)`` in a fresh process."""
        mark_forkserver_parent()   # a forkserver that died is started again by process.start()
        receiver, sender = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=_call, args=("runner.worker", function_name, args, sender),
            name=f"matrixbench-{function_name}")
        process.start()
        sender.close()
        try:
            messages, timed_out = _watch(process, receiver, timeout_s)
        finally:
            _kill_group(process)
            receiver.close()
        return Outcome(exitcode=None if timed_out else process.exitcode,
                       timed_out=timed_out, messages=messages)


def _call(module_name, function_name, args, channel):
    """The child's target: picklable without importing torch in the parent. It dies with the
    forkserver it was forked from (which ends with the runner): a killed runner leaves no cell
    behind to write a record later."""
    cell_dies_with_forkserver()
    _let_go_of_the_forkserver()
    function = getattr(importlib.import_module(module_name), function_name)
    function(*args, channel)


def _let_go_of_the_forkserver():
    """Close this child's copy of the runner's end of the forkserver's "alive" pipe (every forked
    child inherits one): then the forkserver sees the pipe close, and exits, as soon as the runner
    dies, and its death signal takes this child along."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
        server._forkserver_alive_fd = None


def _watch(process, receiver, timeout_s):
    """Collect messages until the process exits or the time limit passes."""
    deadline = time.monotonic() + timeout_s
    messages, sources = [], [receiver, process.sentinel]
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return messages, True
        # wake now and then: a signal that another thread took (SIGTERM from the host, its death
        # signal) runs its handler only once this main thread is back in Python
        ready = wait(sources, timeout=min(remaining, SIGNAL_CHECK_S))
        if receiver in ready:
            _receive(receiver, messages, sources)
        if process.sentinel in ready:
            while receiver in sources and receiver.poll():
                _receive(receiver, messages, sources)
            return messages, False


def _receive(receiver, messages, sources):
    try:
        messages.append(receiver.recv())
    except (EOFError, OSError):
        sources.remove(receiver)


def _kill_group(process):
    """Kill the child and anything it started (it leads its own process group)."""
    if process.pid is not None:
        for kill in (lambda: os.killpg(process.pid, signal.SIGKILL), process.kill):
            try:
                kill()
            except (ProcessLookupError, PermissionError):
                pass
    process.join()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
