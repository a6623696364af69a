"""The run folder (``results/<run>``): made writable before anything runs, written by one run
at a time (``RunLock``), and cleared of the scratch folders a killed run left behind.

A folder that cannot be used is a ResultsFolderError naming ``--results`` and the folder, never
a traceback from deep inside a run.
"""
import errno
import fcntl
import json
import os
import shutil
import socket
import stat
from datetime import datetime, timezone
from pathlib import Path

from matrixbench.errors import ResultsFolderError, ResultsFolderUnwritableError, RunLockedError, name_too_long
from matrixbench.redact import redact_data
from matrixbench.run.layout import lock_path, scratch_dirs, timing_board_dir, turns_dir
from matrixbench.run.results_files import Unvouched, read_json
from runner.files import ROOM_PREFIX


def prepare(run_path):
    """Create ``run_path`` (and its parents) and check that this user can write into it."""
    run_path = Path(run_path)
    try:
        run_path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = _file_in(run_path)
        what = "a symlink that leads nowhere (a loop or a dangling link)" if blocker.is_symlink() else "a file"
        raise ResultsFolderError(
            f"--results: {blocker} is {what}, not a folder; the run folder {run_path} "
            "cannot be made under it. Choose another --results") from None
    except PermissionError:
        raise ResultsFolderUnwritableError(_cannot_write(run_path)) from None
    except OSError as exc:   # a read-only file system, a symlink loop, a name too long
        if exc.errno == errno.EROFS:
            raise ResultsFolderUnwritableError(_cannot_write(run_path)) from None
        if exc.errno == errno.ENAMETOOLONG:   # the path given is the problem: a usage error
            raise ResultsFolderError(f"--results: cannot make {name_too_long(str(run_path))}") from None
        if exc.errno == errno.ELOOP:
            raise ResultsFolderError(f"--results: cannot make {run_path} ({exc.strerror}); choose another "
                                     "--results or --run") from None
        raise ResultsFolderUnwritableError(   # the filesystem refuses (a folder under /proc): exit 9
            f"--results: cannot make {run_path} ({exc.strerror}): the file system there takes no new folder; "
            "choose another --results") from None
    if not os.access(run_path, os.W_OK | os.X_OK) or _read_only(run_path):
        raise ResultsFolderUnwritableError(_cannot_write(run_path))
    return run_path


def _read_only(path):
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _file_in(path):
    """The first part of ``path`` that exists and is not a folder."""
    for part in reversed([path, *path.parents]):
        if (part.exists() and not part.is_dir()) or (part.is_symlink() and not part.exists()):
            return part
    return path


def _cannot_write(run_path):
    existing = next((p for p in [run_path, *run_path.parents] if p.exists()), run_path)
    if _read_only(existing):
        return (f"--results: {existing} is on a read-only file system; the run needs to write {run_path} (its "
                "records stay as they are). Choose another --results, or remount it read-write")
    chown = (f", or give this user write access (e.g. `sudo chown -R {os.getuid()} {existing}`)"
             if _chown_helps(existing) else "")
    return (f"--results: cannot write to {existing} (permission denied for this user, uid {os.getuid()}); the run "
            f"needs to write {run_path} (its records stay as they are). Choose another --results{chown}")


SYSTEM_FOLDERS = (Path("/proc"), Path("/sys"))   # the kernel's: no owner change makes them writable


def _chown_helps(folder):
    """Whether giving this user the folder could help: not for root (who owns everything it may own already),
    nor for a folder of the kernel's."""
    folder = Path(os.path.abspath(folder))
    return os.getuid() != 0 and not any(folder == top or top in folder.parents for top in SYSTEM_FOLDERS)


# --- one writer per run --------------------------------------------------------------------



# The descriptors of the run locks this process holds: its local runners inherit them
# (matrixbench.backends.local), so a run's folder stays locked while any of its runners lives.
_HELD: "set[int]" = set()


def held_lock_fds():
    """The run-lock descriptors a runner started now inherits."""
    return tuple(sorted(_HELD))


class RunLock:
    """An exclusive lock on a run folder: ``run.lock`` holds the holder's pid, host, start time
    and command, and an ``fcntl.flock`` that the kernel drops when the holder and every runner
    that inherited it have died.

    ``acquire()`` refuses (RunLockedError) while another process holds it, naming the processes
    that do (a killed run's runner too); a lock file left by a holder that died (``kill -9``, a
    lost machine) is taken over, and ``stale`` says who it was.
    """

    def __init__(self, run_path, command=()):
        self.path = lock_path(run_path)
        self.command = list(command)
        self.stale = None   # the dead holder's details, when its lock file was taken over
        self._fd = None

    def acquire(self):
        while self._fd is None:
            fd = _open_lock(self.path)
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
        _HELD.add(self._fd)
        return self

    def release(self):
        if self._fd is not None:
            _HELD.discard(self._fd)
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False

    def _held_message(self, holder):
        message = (f"{self.path.parent} is in use by another matrixbench run ({describe_holder(holder)}); "
                   "one run writes a run folder at a time: wait for it to end, or use another --run name")
        host_pid = (holder or {}).get("pid")
        runners = [pid for pid in lock_holders(self.path) if pid != host_pid]
        if runners and host_pid not in lock_holders(self.path):
            message += (f". Its host process is gone but its runner(s) still run and hold the folder: "
                        f"{', '.join(describe_process(pid) for pid in runners)}; they stop by themselves "
                        f"when their cell is stopped, or end them with kill {' '.join(map(str, runners))}")
        return message


def _open_lock(path):
    """The lock file, opened for the lock (a folder or other non-file there is refused by name)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except IsADirectoryError:
        raise ResultsFolderError(f"{path}: the run lock is a folder, not a file; remove it "
                                 f"(rmdir {path}) and rerun") from None
    except OSError as exc:
        raise ResultsFolderError(f"{path}: cannot open the run lock ({exc.strerror}); remove it and rerun") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ResultsFolderError(f"{path}: the run lock is not a regular file; remove it and rerun")
    return fd


def lock_holders(path):
    """The processes with ``path`` open (Linux /proc): a run and the runners it started."""
    try:
        target = os.stat(path)
    except OSError:
        return []
    found = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(_is(fd, target) for fd in fd_dir.iterdir()):
                found.append(int(fd_dir.parent.name))
        except OSError:
            continue
    return sorted(found)


def _is(fd_path, target):
    try:
        found = os.stat(fd_path)
    except OSError:
        return False
    return (found.st_ino, found.st_dev) == (target.st_ino, target.st_dev)


def describe_process(pid):
    """``pid N (its command line)``, from /proc."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"pid {pid}"
    command = " ".join(part.decode(errors="replace") for part in argv if part)
    return f"pid {pid} ({command[:200]})"


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
        holder = read_json(path, "run.lock")   # the one reader of results/: a regular file, at most 1 MiB
    except Unvouched:
        return None
    return holder if isinstance(holder, dict) else None


def _write_holder(fd, command):
    holder = {"pid": os.getpid(), "host": socket.gethostname(),
              "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": redact_data(command)}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(holder, sort_keys=True) + "\n").encode(), 0)


def clean_scratch(run_path):
    """Remove scratch folders a killed run left under the run folder; return how many.
    Call only while holding the run's lock: no runner of this run is alive then."""
    removed = 0
    for scratch in [*scratch_dirs(run_path), *([turns] if (turns := turns_dir(run_path)).exists() else [])]:
        shutil.rmtree(scratch, ignore_errors=True)
        removed += 1
    for room in Path(run_path).glob(f"*/{ROOM_PREFIX}*.tmp"):   # the disk space a killed runner held
        room.unlink(missing_ok=True)
    return removed


def make_timing_board(run_path):
    """A fresh, empty timing board folder for the run's slots (runner.timing_board):
    ``<run>/.timing-board/``. Call only while holding the run's lock."""
    board = timing_board_dir(run_path)
    shutil.rmtree(board, ignore_errors=True)
    board.mkdir(parents=True)
    return board
