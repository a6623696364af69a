"""Find a Python interpreter of a given version on the host, for the venv backend.

Looked for, in this order: ``pythonX.Y`` on PATH, pyenv's installed versions
(``$(pyenv root)/versions/X.Y.*/bin/pythonX.Y``, newest patch first), then ``uv python find
X.Y``. A candidate counts only when it runs, reports that version and can make a venv (its
``venv`` and ``ensurepip`` modules import; Debian splits them into pythonX.Y-venv).
"""
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from matrixbench.errors import InterpreterNotFoundError

# Prints "X.Y <real executable>": a pyenv shim or a symlink resolves to the interpreter behind it.
PROBE = "import sys, venv, ensurepip; print('%d.%d' % sys.version_info[:2], sys.executable)"
PROBE_TIMEOUT_S = 60


@dataclass(frozen=True)
class Interpreter:
    path: Path
    version: str  # "3.10"
    found_by: str  # "PATH", "pyenv" or "uv"


class Finder:
    """The host's tools, as seams: ``environ``, ``which`` and ``run`` (subprocess.run-like)."""

    def __init__(self, environ=None, which=shutil.which, run=subprocess.run):
        self.environ = os.environ if environ is None else environ
        self.which = which
        self.run = run

    def which_on_path(self, name):
        return self.which(name, path=self.environ.get("PATH", os.defpath))

    def output(self, argv):
        """stdout of ``argv`` stripped, or None when it cannot run or fails."""
        try:
            done = self.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                            env=dict(self.environ))
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None


def find_interpreter(version, finder=None):
    """The first working interpreter of ``version`` ("3.10"); InterpreterNotFoundError if none."""
    finder = finder or Finder()
    for found_by, candidate in candidates(version, finder):
        if not candidate:
            continue
        reported, _, executable = (finder.output([str(candidate), "-c", PROBE]) or "").partition(" ")
        if reported == version:
            return Interpreter(Path(executable or candidate), version, found_by)
    raise InterpreterNotFoundError(not_found_message(version, finder))


def candidates(version, finder):
    """(where, path) pairs in the order they are tried; uv is asked only when nothing else works."""
    yield "PATH", finder.which_on_path(f"python{version}")
    for path in pyenv_candidates(version, finder):
        yield "pyenv", path
    uv = finder.which_on_path("uv")
    if uv:
        yield "uv", finder.output([uv, "python", "find", version])


def pyenv_root(finder):
    """$PYENV_ROOT, else what `pyenv root` says, else ~/.pyenv."""
    root = finder.environ.get("PYENV_ROOT")
    if not root:
        pyenv = finder.which_on_path("pyenv")
        root = finder.output([pyenv, "root"]) if pyenv else None
    return Path(root) if root else Path.home() / ".pyenv"


def pyenv_candidates(version, finder):
    """pyenv's builds of ``version``, newest patch release first ("3.10.13" before "3.10.9")."""
    pattern = re.compile(rf"^{re.escape(version)}\.(\d+)$")
    versions = pyenv_root(finder) / "versions"
    if not versions.is_dir():
        return []
    found = [(int(match.group(1)), folder) for folder in versions.iterdir()
             if (match := pattern.match(folder.name))]
    return [folder / "bin" / f"python{version}" for _, folder in sorted(found, reverse=True)
            if (folder / "bin" / f"python{version}").exists()]


def not_found_message(version, finder):
    return (
        f"no Python {version} interpreter that can make a venv: looked for python{version} on "
        f"PATH, in pyenv's versions ({pyenv_root(finder) / 'versions'}) and with `uv python find "
        f"{version}`. Install it, e.g. `pyenv install {version}`, `uv python install {version}`, "
        f"or your distribution's python{version} and python{version}-venv packages; or run this "
        "image with --backend docker"
    )
