"""Reading a file that someone may have replaced with something else: only a regular file (a
symlink to one is fine), only up to a size limit. A FIFO would block the reader forever,
``/dev/zero`` or a huge file would fill its memory. Stdlib only (the runner uses it too).
"""
from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path
from typing import Tuple, Union

MIB = 1024 * 1024
ROOM_BYTES = 256 * 1024     # a record is a few KiB: room for it many times over, in a cell's output folder
ROOM_PREFIX = ".room."      # the hidden file that holds it: ".room.<pid>.<hex>.tmp"
FULL = (errno.ENOSPC, errno.EDQUOT)   # a full disk, a full quota: the room's own blocks still take the record


class UnreadableFileError(OSError):
    """Not a regular file, or larger than the limit; the message says which and names the file."""


def read_bounded_text(path: Union[str, Path], max_bytes: int) -> str:
    """The file's text (UTF-8), refusing what is not a regular file or is over ``max_bytes``.
    OSError (UnreadableFileError or the system's) when it cannot be read; ValueError when it is
    not UTF-8."""
    path = Path(path)
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise UnreadableFileError(f"{path} is {describe_kind(info.st_mode)}, not a regular file")
    if info.st_size > max_bytes:
        raise UnreadableFileError(f"{path} is {info.st_size} bytes, over the limit of {max_bytes}")
    with open(path, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnreadableFileError(f"{path} grew over the limit of {max_bytes} bytes while being read")
    return data.decode("utf-8")


def describe_kind(mode: int) -> str:
    """What a file of this mode is, in words: "a folder", "a FIFO", "a device", ..."""
    for test, words in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "not a regular file"


def write_atomic(path: Union[str, Path], data: bytes) -> None:
    """Replace ``path`` with ``data`` whole or not at all: a temp file of its own in the same
    folder, flushed to disk, then renamed over it. On any failure (a full disk: ENOSPC) the temp
    file is removed, ``path`` keeps what it held, and the OSError names ``path``."""
    path = Path(path)
    try:
        fd, tmp = _create_temp(path)
    except OSError as exc:   # the folder refuses a new file (read-only, permission): name the folder
        exc.filename = str(path.parent)
        raise
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(path)
        raise


class Room:
    """Disk space held for a file not yet written: taken before a cell is measured, so that the disk
    filling up meanwhile (other cells, other programs) cannot lose its numbers. ``write`` writes as
    ``write_atomic`` does; on ENOSPC it writes into the room's own blocks (allocated when it was taken, so
    the write needs no new ones) and renames it over the file. Taking it on a full (or read-only, or
    unwritable) folder raises the OSError, naming the folder, before anything is measured."""

    def __init__(self, path: Union[str, Path]) -> None:
        self.path = Path(path)   # taken by ``take`` (here, or in the process that hands the path over)

    @classmethod
    def take(cls, folder: Union[str, Path], size: int = ROOM_BYTES) -> "Room":
        room = cls(Path(folder) / f"{ROOM_PREFIX}{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(room.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)   # less the umask, as a record
        except OSError as exc:
            exc.filename = str(folder)
            raise
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno in FULL:
                room.release()
                exc.filename = str(folder)
                raise
            # a filesystem that cannot allocate ahead (EOPNOTSUPP...): the cell runs, without the room's guarantee
        finally:
            os.close(fd)
        return room

    def write(self, path: Union[str, Path], data: bytes) -> None:
        """``path`` holds ``data`` whole; on a full disk or quota, by way of the room (then given up)."""
        try:
            write_atomic(path, data)
        except OSError as exc:
            if exc.errno not in FULL or not self.path.exists():
                raise
            with open(self.path, "r+b") as handle:
                handle.write(data)
                handle.truncate(len(data))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(self.path, path)

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def __enter__(self) -> "Room":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def _create_temp(path: Path) -> Tuple[int, str]:
    """A new temp file beside ``path``, created with mode 0o666 less the umask as a plain open()
    would (mkstemp's 0o600 would lock out a container's other user reading cells.json)."""
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temp file name", str(path))
