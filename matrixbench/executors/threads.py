"""The one thread runner: works in threads of their own, one stop signal, errors and Ctrl-C handed to the
calling thread.

Slots (one thread per slot, taking units from a queue: the matrix's and the calibration's) and a Ray
task on its node (one thread, so that Ray's cancel, a KeyboardInterrupt in the main thread, arrives
between short joins) run through ``run_threads``.
"""
import threading
from typing import Callable, List, Sequence, TypeVar

JOIN_POLL_S = 0.2
Work = Callable[[threading.Event], None]   # gets the stop signal: start nothing new once it is set


def run_threads(works: Sequence[Work], stop_runners: Callable[[], None], names: Sequence[str]) -> None:
    """Run each of ``works`` in a thread named by ``names``; return when all are done.

    The first error sets the stop signal (works start nothing new; running runners finish) and is
    raised once every thread is done. Ctrl-C sets it too, calls ``stop_runners()`` (the runners
    already started stop; their finished records stay), waits for the threads and passes through.
    """
    stopping, errors, lock = threading.Event(), [], threading.Lock()

    def target(work: Work) -> None:
        try:
            work(stopping)
        except BaseException as exc:  # noqa: B036 -- handed to the calling thread, raised there
            with lock:
                errors.append(exc)
            stopping.set()

    threads = [threading.Thread(target=target, args=(work,), name=name, daemon=True)
               for work, name in zip(works, names)]
    for thread in threads:
        thread.start()
    try:
        _join(threads)
    except KeyboardInterrupt:
        stopping.set()
        stop_runners()
        for thread in threads:
            thread.join()
        raise
    if errors:
        raise errors[0]


R = TypeVar("R")


def run_in_thread(work: Callable[[], R], stop_runners: Callable[[], None], name: str) -> R:
    """``work()`` in a thread of its own while this one waits in short joins; its value."""
    result: List[R] = []
    run_threads([lambda stopping: result.append(work())], stop_runners, [name])
    return result[0]


def _join(threads: Sequence[threading.Thread]) -> None:
    """Wait for ``threads`` in short joins, so Ctrl-C reaches the calling thread meanwhile."""
    for thread in threads:
        while thread.is_alive():
            thread.join(JOIN_POLL_S)
