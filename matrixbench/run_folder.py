"""The run folder (``results/<run>``): made writable before anything runs, written by one run
at a time (``RunLock``), and cleared of the scratch folders a killed run left behind.

A folder that cannot be used is a ResultsFolderError naming ``--results`` and the folder, never
a traceback from deep inside a run.
"""
import fcntl
import json
import os
import shutil
import socket
from datetime import datetime, timezone
from pathlib import Path

from matrixbench.errors import ResultsFolderError, RunLockedError
from matrixbench.layout import lock_path, scratch_dirs, timing_board_dir


def prepare(run_path):
    """Create ``run_path`` (and its parents) and check that this user can write into it."""
    run_path = Path(run_path)
    try:
        run_path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ResultsFolderError(
            f"--results: {_file_in(run_path)} is a file, not a folder; the run folder {run_path} "
            "cannot be made under it. Choose another --results") from None
    except PermissionError:
        raise ResultsFolderError(_cannot_write(run_path)) from None
    if not os.access(run_path, os.W_OK | os.X_OK):
        raise ResultsFolderError(_cannot_write(run_path))
    return run_path


def _file_in(path):
    """The first part of ``path`` that exists and is not a folder."""
    for part in reversed([path, *path.parents]):
        if part.exists() and not part.is_dir():
            return part
    return path


def _cannot_write(run_path):
    existing = next((p for p in [run_path, *run_path.parents] if p.exists()), run_path)
    return (f"--results: cannot write to {existing} (permission denied for this user); "
            f"the run needs to create {run_path}. Choose another --results or fix its permissions")


# --- one writer per run --------------------------------------------------------------------



class RunLock:
    """An exclusive lock on a run folder: ``run.lock`` holds the holder's pid, host, start time
    and command, and an ``fcntl.flock`` that the kernel drops when the holder dies.

    ``acquire()`` refuses (RunLockedError) while another process holds it; a lock file left by a
    holder that died (``kill -9``, a lost machine) is taken over, and ``stale`` says who it was.
    """

    def __init__(self, run_path, command=()):
        self.path = lock_path(run_path)
        self.command = list(command)
        self.stale = None   # the dead holder's details, when its lock file was taken over
        self._fd = None

    def acquire(self):
        while self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise RunLockedError(self._held_message(_read_holder(self.path))) from None
            if _same_file(fd, self.path):   # not unlinked by a holder releasing meanwhile
                self._fd = fd
            else:
                os.close(fd)
        self.stale = _read_holder(self.path)
        _write_holder(self._fd, self.command)
        return self

    def release(self):
        if self._fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False

    def _held_message(self, holder):
        return (f"{self.path.parent} is in use by another matrixbench run ({describe_holder(holder)}); "
                "one run writes a run folder at a time: wait for it to end, or use another --run name")


def describe_holder(holder):
    if not holder:
        return "holder unknown"
    command = " ".join(holder.get("command") or []) or "?"
    return (f"pid {holder.get('pid')} on {holder.get('host')}, started {holder.get('started_at')}: "
            f"{command}")


def _same_file(fd, path):
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _read_holder(path):
    try:
        holder = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def _write_holder(fd, command):
    holder = {"pid": os.getpid(), "host": socket.gethostname(),
              "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(holder, sort_keys=True) + "\n").encode(), 0)


def clean_scratch(run_path):
    """Remove scratch folders a killed run left under the run folder; return how many.
    Call only while holding the run's lock: no runner of this run is alive then."""
    removed = 0
    for scratch in scratch_dirs(run_path):
        shutil.rmtree(scratch, ignore_errors=True)
        removed += 1
    return removed


def make_timing_board(run_path):
    """A fresh, empty timing board folder for the run's slots (runner.timing_board):
    ``<run>/.timing-board/``. Call only while holding the run's lock."""
    board = timing_board_dir(run_path)
    shutil.rmtree(board, ignore_errors=True)
    board.mkdir(parents=True)
    return board
