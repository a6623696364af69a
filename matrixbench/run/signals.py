"""SIGHUP and SIGTERM stop a command as Ctrl-C does: the run stops its runners, keeps every
finished record and says in run.json which signal stopped it; the exit code is 128 + the signal.

SIGINT gets Python's own handler back even where the command was started with it ignored (a
background job of a non-interactive shell), so Ctrl-C and ``kill -INT`` always stop a run cleanly.
"""
import contextlib
import signal
import threading

STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


class Stopped(KeyboardInterrupt):
    """A stop signal other than SIGINT, raised where the main thread is (it is a KeyboardInterrupt,
    so every Ctrl-C path applies)."""

    def __init__(self, name):
        super().__init__(name)
        self.signal = name


def signal_name(interrupt):
    """Which signal stopped a command: the Stopped's, else SIGINT (Ctrl-C)."""
    return getattr(interrupt, "signal", "SIGINT")


def exit_code(interrupt):
    """128 + the signal's number: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + int(getattr(signal, signal_name(interrupt)))


def _raise(signum, frame):
    raise Stopped(signal.Signals(signum).name)


@contextlib.contextmanager
def stop_signals():
    """While inside: SIGINT raises KeyboardInterrupt, SIGTERM and SIGHUP raise Stopped; the
    previous handlers come back after. Outside the main thread nothing changes (Python allows
    handlers there only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {name: getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name)}
    previous = {name: signal.getsignal(number) for name, number in handlers.items()}
    for name, number in handlers.items():
        signal.signal(number, signal.default_int_handler if name == "SIGINT" else _raise)
    try:
        yield
    finally:
        for name, number in handlers.items():
            signal.signal(number, previous[name])
