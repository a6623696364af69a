"""The report written whole or not at all.

Every file of a report is written into a temporary folder beside ``--out`` (``.<name>.report-<pid>-<hex>``,
same file system), then moved into place:

- ``--out`` missing, or holding only what reports write (REPORT_ENTRIES) and hidden entries: the new
  folder and the old one are swapped in one step (Linux ``renameat2(RENAME_EXCHANGE)``; elsewhere two
  renames), then the old one is removed. A ``kill -9`` at any moment leaves the old report or the new
  one in ``--out``, whole, never a mix.
- ``--out`` holding other files of yours (a working folder): each of the report's files is renamed
  over its old one (``os.replace``: each file whole), the charts folder swapped as a whole, and a
  report output the new report does not write is removed; your files stay.

On any failure before the move the temporary folder is removed and ``--out`` is as it was; the error
names the path, the file system (its mount point and type) and its free space. A temporary folder a
killed report left is removed by the next report into the same ``--out``.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import shutil
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

from matrixbench.errors import FolderError, describe_os_error

REPORT_ENTRIES = frozenset({"report.md", "report.html", "charts", "results.csv", "results.jsonl",
                            "comparisons.csv", "costs.csv", "bill.csv"})
STAGE_MARK = ".report-"
RENAME_EXCHANGE = 2


def stage_prefix(out_dir: Path) -> str:
    return f".{out_dir.name}{STAGE_MARK}"


class Staged:
    """A report being written: ``folder`` is where its files go; ``publish`` moves them to ``out_dir``."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = Path(os.path.abspath(out_dir))
        existing = next(p for p in [self.out_dir, *self.out_dir.parents] if os.path.lexists(p))
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(existing))
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(self.out_dir)
        self.folder = self.out_dir.parent / f"{stage_prefix(self.out_dir)}{os.getpid()}-{secrets.token_hex(4)}"
        self.folder.mkdir()

    def final(self, path: Path) -> Path:
        """Where a file written under ``folder`` ends up."""
        return self.out_dir / Path(path).relative_to(self.folder)

    def publish(self) -> None:
        if not self.out_dir.exists() or _only_reports(self.out_dir):
            _swap(self.folder, self.out_dir)
            shutil.rmtree(self.folder, ignore_errors=True)   # the old report, now under the stage's name
        else:
            _replace_each(self.folder, self.out_dir)
            shutil.rmtree(self.folder, ignore_errors=True)

    def discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


@contextlib.contextmanager
def staged_report(out_dir: Path, flag: str = "--out") -> Iterator[Staged]:
    """A Staged report: written in the block, published after it; on any failure discarded, the old
    report left as it was, and an OSError a FolderError naming the path, its file system and free space."""
    final = Path(os.path.abspath(out_dir))
    try:
        stage = Staged(final)
    except OSError as exc:
        raise FolderError(f"{flag}: {describe_failure(exc, final, None, flag)}") from None
    try:
        yield stage
        stage.publish()
    except OSError as exc:
        stage.discard()
        raise FolderError(f"{flag}: {describe_failure(exc, final, stage.folder, flag)}") from None
    except BaseException:
        stage.discard()
        raise


def describe_failure(exc: OSError, out_dir: Path, stage: Optional[Path] = None, flag: str = "--out") -> str:
    """The failed path (a file of the report being written named as it would be in ``out_dir``), why, its
    file system (mount point and type) and the free space there, and what became of the report."""
    path = Path(exc.filename) if isinstance(exc.filename, str) else out_dir
    if stage is not None and (path == stage or stage in path.parents):
        path = out_dir / path.relative_to(stage)
    elif path.name.startswith(stage_prefix(out_dir)):
        path = out_dir
    mount, kind, free = file_system(path)
    space = f"{free:,} bytes free" if free is not None else "free space unknown"
    kept = (f"{out_dir} holds the previous report as it was" if os.path.lexists(out_dir)
            else "nothing was written")
    where = f"file system {mount}, {kind}, {space}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{path}: {exc.strerror or exc} ({where}); make room or choose another {flag}: the report was not " \
               f"written, {kept}"
    named = OSError(exc.errno, exc.strerror or str(exc), str(path))
    text = describe_os_error(named)
    way_out = "" if "choose" in text.lower() else f"; choose another {flag}"
    return f"{text}{way_out} ({where}; the report was not written, {kept})"


def file_system(path: Path) -> Tuple[str, str, Optional[int]]:
    """(mount point, file system type, free bytes) of the file system ``path`` (or its nearest existing
    folder above) is on."""
    existing = next((p for p in [path, *path.parents] if p.exists()), Path("/"))
    real = os.path.realpath(existing)
    mount, kind = "/", "unknown"
    with contextlib.suppress(OSError):
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(mount):
                    mount, kind = point, fields[2]
    try:
        free: Optional[int] = shutil.disk_usage(existing).free
    except OSError:
        free = None
    return mount, kind, free


def _only_reports(folder: Path) -> bool:
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    return folder.is_dir() and not folder.is_symlink() and \
        all(name in REPORT_ENTRIES or name.startswith(".") for name in names)


def _swap(new: Path, old: Path) -> None:
    """``old`` becomes what ``new`` holds; ``new`` then holds the old one (or nothing)."""
    if not os.path.lexists(old):
        os.rename(new, old)
        new.mkdir()
        return
    if _exchange(new, old):
        return
    aside = new.parent / f"{new.name}.old"
    os.rename(old, aside)
    try:
        os.rename(new, old)
    except OSError:
        os.rename(aside, old)
        raise
    os.rename(aside, new)


def _exchange(a: Path, b: Path) -> bool:
    """renameat2(RENAME_EXCHANGE): both names swapped in one step; False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _replace_each(new: Path, out_dir: Path) -> None:
    for name in sorted(REPORT_ENTRIES):
        source, target = new / name, out_dir / name
        if source.is_dir():
            if target.is_dir() and not target.is_symlink():
                _swap(source, target)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(target)
                os.rename(source, target)
        elif source.exists():
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(source, target)
        elif os.path.lexists(target):
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            else:
                os.unlink(target)


def _remove_stale(out_dir: Path) -> None:
    """Stage folders of reports into ``out_dir`` that were killed (their process is gone)."""
    prefix = stage_prefix(out_dir)
    with contextlib.suppress(OSError):
        for entry in os.scandir(out_dir.parent):
            if not entry.name.startswith(prefix):
                continue
            pid = entry.name[len(prefix):].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def relocate(paths: List[Path], stage: Staged) -> List[Path]:
    return [stage.final(Path(path)) for path in paths]
