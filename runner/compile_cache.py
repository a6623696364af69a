"""Repairing the shared compile cache: compiled modules (``.so``) that can never be loaded.

Stdlib only (the driver imports it too). Inductor checks only that a compiled module exists before loading it,
so a ``.so`` left empty or half-written in a shared cache (TORCHINDUCTOR_CACHE_DIR, runner.driver.compile_cache_dirs)
by a process killed while compiling fails every later compile of its graph, in every run, until someone deletes
it; with the file gone, Inductor compiles it again from its source beside it.

When a compiled cell fails, its process (runner.cell) removes from its own cache folders, and from nowhere else:
- a ``.so`` the error names that cannot be loaded ("file too short", "invalid ELF header", or empty or not ELF
  on disk: torch 2.13 on CPU says ``ImportError: <path>.main.so: file too short`` for an emptied graph module);
- any other ``.so`` there that is empty or not ELF at all, unless it changed in the last SWEEP_GRACE_S (another
  process sharing the cache may be writing it). Such a file breaks compiles without being named: an emptied
  vector-ISA probe (``<hash>.so`` beside its ``.cpp``) makes Inductor think the CPU has no vector ISA, and the
  next compile fails with a C++ compile error naming only a ``.cpp``.
The record then says ``CompileCacheRepaired`` (the files removed, their sizes, the original error); the driver
runs the repeat once more in a fresh process, and that record, the one kept, says a first attempt repaired the
cache (``note_repair``). docs/reliability.md, "A broken compile cache".
"""
from __future__ import annotations

import os
import re
import stat
import time
import traceback
from dataclasses import dataclass
from typing import Iterable, List, Mapping, Optional, Sequence

from runner.core import CellError, Record

REPAIRED = "CompileCacheRepaired"   # the error type of a record whose process repaired the cache
FLAG = "compile_cache_repaired"     # timing.flags of an ok record whose first attempt repaired the cache
SWEEP_GRACE_S = 60.0
LOAD_FAILURES = ("file too short", "invalid elf header")
ELF_MAGIC = b"\x7fELF"
MAX_NAMED = 5   # files named in a message; the count says how many more
MAX_NOTE_CHARS = 1000
# An absolute path ending in .so, as loaders and Inductor print it.
_SO_PATH = re.compile(r"/[^\s:'\"()\[\],]+\.so\b")


@dataclass(frozen=True)
class Removal:
    """A compiled module removed from the cache: where, its size, and why it could not be loaded."""

    path: str
    size: int
    reason: str

    def describe(self) -> str:
        return f"{self.path} ({self.size} bytes, {self.reason})"


def named_modules(text: str) -> List[str]:
    """The ``.so`` paths an error's text names, each once, in order."""
    return list(dict.fromkeys(_SO_PATH.findall(text)))


def within(path: str, roots: Iterable[Optional[str]]) -> Optional[str]:
    """``path`` as a real path if it is a regular file (not a symlink) inside one of ``roots``, else None.
    A path with a ``..`` component is refused outright, whatever it resolves to."""
    if not os.path.isabs(path) or ".." in path.split(os.sep):
        return None
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
    except OSError:
        return None
    real = os.path.realpath(path)
    for root in roots:
        if root and os.path.isdir(root):
            top = os.path.realpath(root)
            if real != top and os.path.commonpath([real, top]) == top:
                return real
    return None


def unloadable(path: str, said: str = "") -> Optional[str]:
    """Why the compiled module at ``path`` can never be loaded (``said``: the loader's words about it), else None."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            head = handle.read(len(ELF_MAGIC))
    except OSError:
        return None
    if size == 0:
        return "empty"
    if head != ELF_MAGIC:
        return "not an ELF file"
    failure = next((words for words in LOAD_FAILURES if words in said.lower()), None)
    return f"the loader said {failure!r}" if failure else None


def _lines_naming(text: str, path: str) -> str:
    return "\n".join(line for line in text.splitlines() if path in line)


def broken_named(text: str, roots: Sequence[Optional[str]]) -> List[str]:
    """The unloadable ``.so`` files inside ``roots`` that the error's ``text`` names."""
    found = []
    for named in named_modules(text):
        real = within(named, roots)
        if real and unloadable(real, _lines_naming(text, named)):
            found.append(named)
    return found


def broken_in(roots: Sequence[Optional[str]], now: Optional[float] = None,
              grace_s: float = SWEEP_GRACE_S) -> List[str]:
    """Every empty or non-ELF ``.so`` inside ``roots`` unchanged for ``grace_s`` (symlinks neither followed nor
    listed)."""
    now = time.time() if now is None else now
    found = []
    for root in roots:
        if not root or not os.path.isdir(root):
            continue
        for folder, _, names in os.walk(root):
            for name in sorted(names):
                path = os.path.join(folder, name)
                if name.endswith(".so") and within(path, [root]) and _settled(path, now, grace_s) \
                        and unloadable(path):
                    found.append(path)
    return found


def _settled(path: str, now: float, grace_s: float) -> bool:
    try:
        return now - os.lstat(path).st_mtime >= grace_s
    except OSError:
        return False


def repair(text: str, roots: Sequence[Optional[str]], now: Optional[float] = None) -> List[Removal]:
    """Remove the unloadable compiled modules (``broken_named`` and ``broken_in``) inside ``roots``; what was
    removed. A file that vanished or could not be removed meanwhile is left out."""
    removed = []
    for path in dict.fromkeys(broken_named(text, roots) + broken_in(roots, now)):
        real = within(path, roots)
        reason = real and unloadable(real, _lines_naming(text, path))
        if not real or not reason:
            continue
        size = os.path.getsize(real)
        try:
            os.unlink(real)
        except OSError:
            continue
        removed.append(Removal(real, size, reason))
    return removed


def repaired_message(removed: Sequence[Removal], error_type: str, message: str) -> str:
    """The message of a record whose process repaired the cache: the files removed, then the original error."""
    shown = "; ".join(removal.describe() for removal in removed[:MAX_NAMED])
    more = f"; and {len(removed) - MAX_NAMED} more" if len(removed) > MAX_NAMED else ""
    return (f"the compile cache held {len(removed)} compiled module(s) that cannot be loaded, now removed "
            f"(Inductor compiles them again from source): {shown}{more}. The original error: {error_type}: {message}")


def mark_repaired(record: Record, exc: BaseException, cache_dirs: Mapping[str, Optional[str]],
                  now: Optional[float] = None) -> List[Removal]:
    """For a failed compiled cell's ``record`` (its error already set from ``exc``): repair the cell's cache
    folders (``cache_dirs``, the job's compile_cache_dirs) and, where something was removed, make the record's
    error a ``CompileCacheRepaired`` (traceback kept)."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    removed = repair(text, list(cache_dirs.values()), now)
    if removed and record.error is not None:
        record.error = CellError(type=REPAIRED, traceback=record.error.traceback,
                                 message=repaired_message(removed, record.error.type, record.error.message))
    return removed


def was_repaired(record: Record) -> bool:
    return record.error is not None and record.error.type == REPAIRED


def note_repair(record: Record, note: Optional[str]) -> Record:
    """The record of a repeat run again after its first attempt repaired the cache (``note``: that attempt's
    message): a failure's message starts with it; an ok record gets FLAG in ``timing.flags`` (its compile time
    includes compiling the removed modules again)."""
    if not note:
        return record
    note = note if len(note) <= MAX_NOTE_CHARS else note[:MAX_NOTE_CHARS] + " [...]"
    if record.error is not None:
        record.error = CellError(type=record.error.type, traceback=record.error.traceback,
                                 message=f"{record.error.message}\n(A first attempt of this repeat repaired the "
                                         f"compile cache: {note})")
    elif isinstance(record.timing, dict):
        record.timing["flags"] = list(record.timing.get("flags") or []) + [FLAG]
    return record
