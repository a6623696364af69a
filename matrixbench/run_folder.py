"""The run folder (``results/<run>``): made writable before anything runs.

Every problem is a ResultsFolderError naming ``--results`` and the folder, never a traceback
from deep inside a run.
"""
import os
from pathlib import Path

from matrixbench.errors import ResultsFolderError


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
