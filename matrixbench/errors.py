"""Every error matrixbench raises on purpose is a MatrixbenchError; cli.py turns them into exit codes."""
import errno
import os
import shutil
from pathlib import Path
from typing import Mapping, Optional


class MatrixbenchError(Exception):
    """Base of all matrixbench errors. The message says what is wrong and how to fix it."""

    exit_code = 1

    def worded_for(self, command: str) -> str:
        """The message as ``matrixbench <command>`` says it (one that a command words its own fix for: ``fixes``)."""
        return str(self)


class MatrixError(MatrixbenchError):
    """matrix.yaml or a CLI override is invalid."""

    exit_code = 2


class OptionConflictError(MatrixError):
    """Options (flags or matrix settings) that contradict each other or the chosen executor: one would be
    silently ignored (``--executor ray --slots 2``, ``--gpu-types`` without ray). A usage error: exit 2."""


class DockerUnavailableError(MatrixbenchError):
    """No Docker daemon answers."""

    exit_code = 3


class BuildError(MatrixbenchError):
    """An image build failed; the message carries the build log tail."""

    exit_code = 4


class RunError(MatrixbenchError):
    """A run could not start or its container failed outside any cell."""

    exit_code = 5


class ManifestError(MatrixbenchError):
    """A run manifest (run.json) is unreadable, not what matrixbench writes, or of an unknown
    schema version: named, never overwritten (docs/reliability.md)."""

    exit_code = 8

    def __init__(self, problem: str, fixes: Optional[Mapping[str, str]] = None) -> None:
        """``fixes``: the way out each command offers ({"run": ..., "report": ...}); "run"'s is the message's."""
        self.problem, self.fixes = problem, dict(fixes or {})
        super().__init__(f"{problem}; {self.fixes['run']}" if "run" in self.fixes else problem)

    def worded_for(self, command: str) -> str:
        return f"{self.problem}; {self.fixes[command]}" if command in self.fixes else str(self)


class ReportError(MatrixbenchError):
    """Records cannot be read or merged into a report."""

    exit_code = 6


class PriceError(MatrixbenchError):
    """A --price that is not GPU_TYPE=DOLLARS_PER_GPU_HOUR (matrixbench.matrix.prices)."""

    exit_code = 2


class ResultsFolderError(MatrixbenchError):
    """The results folder cannot hold the run: under a file, or not writable."""

    exit_code = 2


class RunLockedError(RunError):
    """Another matrixbench run holds the run folder's lock."""


class ResumeConflictError(MatrixbenchError):
    """A run would resume records measured with other settings than it asks for."""

    exit_code = 2


class InterpreterNotFoundError(BuildError):
    """The venv backend finds no Python of the version an image asks for."""


class IndexUnreachableError(BuildError):
    """The main pip index (INDEX_URL) does not answer from this host and the wheelhouse lacks wheels a build
    needs: said at once, instead of pip retrying for minutes (matrixbench/build/indexes.py)."""


FILESYSTEM_EXIT_CODE = 9   # an OSError no other error covers: disk full, read-only, permission denied


class ResultsFolderUnwritableError(ResultsFolderError):
    """The results folder is on a read-only file system, this user may not write it, or its file system takes
    no new folder (under /proc): the filesystem's refusal."""

    exit_code = FILESYSTEM_EXIT_CODE


class FolderError(MatrixbenchError):
    """An OSError on the folder an option chose (``report --out``, ``selftest --results``), named with the option."""

    exit_code = FILESYSTEM_EXIT_CODE


def describe_os_error(exc):
    """One line for an OSError from reading or writing a file: the path, the reason and, for a full
    disk, the free space left and what to do."""
    path = exc.filename or "a file"
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        existing = next((p for p in [Path(path), *Path(path).parents] if p.exists()), Path("."))
        free = shutil.disk_usage(existing).free
        return (f"{path}: no space left on device ({free:,} bytes free there); finished records are kept, "
                "nothing was half-written: free some space and rerun the same command, the cells without a "
                "record run again")
    if exc.errno == errno.EROFS:
        return f"{path}: read-only file system; choose a writable folder (--results / --out), or remount it read-write"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return (f"{path}: permission denied for this user (uid {os.getuid()}); give it write access (a folder, a "
                "file written) or read and execute access (an interpreter run), or choose another folder "
                "(--results / --out)")
    if exc.errno == errno.ENAMETOOLONG:
        return name_too_long(str(path))
    if exc.errno == errno.ELOOP:
        return f"{path}: too many levels of symbolic links (a symlink loop); fix the link"
    return f"{path}: {reason}"


def name_too_long(path: str) -> str:
    """ENAMETOOLONG, said of what is too long: a part of the path over the file system's limit for a name, or the
    whole path. Run, image and model names are bounded well below that (matrixbench.run.layout), so the folder a
    --results / --out / --cache-dir gave is what to shorten; no name is proposed that another run may have."""
    existing = next((p for p in Path(path).parents if _is_dir(p)), Path("."))
    name_max, path_max = _limit(existing, "PC_NAME_MAX", 255), _limit(existing, "PC_PATH_MAX", 4096)
    long_part = next((part for part in Path(path).parts if len(os.fsencode(part)) > name_max), None)
    if long_part is not None:
        what = (f"its part {long_part[:40]}... has {len(os.fsencode(long_part))} bytes, over this file system's "
                f"{name_max} for a name")
    else:
        what = f"it has {len(os.fsencode(path))} bytes, over this file system's {path_max} for a path"
    return (f"{path[:120]}...: file name too long: {what}; shorten the folder given with --results / --out / "
            "--cache-dir (or choose one nearer the root)")


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:   # itself too long
        return False


def _limit(folder: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(folder, name)
    except (OSError, ValueError):
        return default
