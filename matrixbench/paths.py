"""Where matrixbench keeps what it can rebuild: one cache folder, the XDG convention's."""
import os
from pathlib import Path


def cache_home(environ=None):
    """``$XDG_CACHE_HOME/matrixbench``, else ``~/.cache/matrixbench``: compile caches, venvs, wheels."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "matrixbench"
