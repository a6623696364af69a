"""Where matrixbench keeps what it can rebuild: one cache folder, the XDG convention's."""
import os
from pathlib import Path
from typing import Mapping, Optional


def cache_home(environ=None):
    """``$XDG_CACHE_HOME/matrixbench``, else ``~/.cache/matrixbench``: compile caches, venvs, wheels."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "matrixbench"


def compile_cache_root(environ=None):
    """Per-image compile caches live under ~/.cache/matrixbench/compile/<image>."""
    return cache_home(environ) / "compile"


def model_hash_cache(environ: Optional[Mapping[str, str]] = None) -> Path:
    """The host's cache of local models' files' hashes (runner.hash_cache), so a matrix load reads a
    checkpoint's weights only when they changed."""
    return Path(cache_home(environ)) / "model-hashes.json"


def hf_cache_home(environ=None):
    """The host's Hugging Face cache: ``$HF_HOME``, else ``~/.cache/huggingface``."""
    environ = os.environ if environ is None else environ
    return Path(environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
