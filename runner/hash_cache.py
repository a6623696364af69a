"""A local model's files' hash, remembered by what the files look like: (path, size, mtime_ns, inode) of each.

``runner.registry.local_model_hash`` reads every byte of a model's config, preprocessor config and weights; a
multi-GB checkpoint is read through again at every matrix load on the host and in every cell process of the run.
With a cache file it reads them only when one of those files' (path, size, mtime_ns, inode) is not one it has
hashed: an edited, replaced or touched file is a new key, so it is hashed again, never taken from the cache.

The cache is untrusted input (stdlib only: the host and the runner use it): a file that is not a regular file,
is over ``MAX_BYTES``, is not JSON, has another ``version``, or holds an entry that is not a hash, is ignored as a
whole or entry by entry, never an error; a cache that cannot be written is not one either. A file modified less
than ``FRESH_NS`` before it was hashed is not remembered: its next change might keep its size and mtime (a
coarse-mtime file system), as git's index treats such "racy" entries. Stdlib only.

Layout: ``{"version": 1, "entries": [[key, "sha256:<16 hex>"], ...]}``, oldest first, at most ``MAX_ENTRIES`` (the
newest kept), a key being the JSON of ``[weights, [[label, absolute path, size, mtime_ns, inode], ...]]``.
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from runner.files import MIB, read_bounded_text, write_atomic

VERSION = 1
MAX_BYTES = 4 * MIB
MAX_ENTRIES = 256
FRESH_NS = 2_000_000_000   # files changed within 2 s of their hashing are not remembered
HASH_PATTERN = re.compile(r"^sha256:[0-9a-f]{16}$")
FILENAME = "model-hashes.json"
RUNNER_DIRNAME = ".model-hashes"   # the runner's, in its output folder (hidden: no record is looked for there)
PathLike = Union[str, Path]
Labelled = Sequence[Tuple[str, Path]]   # (label in the hash, file) of every file hashed


def runner_cache(out_dir: PathLike) -> Path:
    """The runner's cache: in its output folder, so every cell process of an image shares it."""
    return Path(out_dir) / RUNNER_DIRNAME / FILENAME


def file_key(weights: str, files: Labelled) -> Optional[Tuple[str, int]]:
    """The key of these files as they are now, and their newest mtime_ns; None when one cannot be stat'ed."""
    stats: List[List[object]] = []
    newest = 0
    try:
        for label, path in files:
            info = os.stat(path)
            stats.append([label, os.path.abspath(path), info.st_size, info.st_mtime_ns, info.st_ino])
            newest = max(newest, info.st_mtime_ns)
    except OSError:
        return None
    return json.dumps([weights, stats], separators=(",", ":")), newest


def lookup(cache: PathLike, key: str) -> Optional[str]:
    """The hash remembered for ``key``, or None (no cache, an unreadable or foreign one, no such entry)."""
    return _entries(cache).get(key)


def remember(cache: PathLike, key: str, value: str, newest_mtime_ns: int) -> bool:
    """Remember ``value`` for ``key`` (whether it was written): not for files changed within FRESH_NS, not a value
    that is not a hash, and a cache that cannot be written is left as it is."""
    if not HASH_PATTERN.match(value) or time.time_ns() - newest_mtime_ns < FRESH_NS:
        return False
    entries = _entries(cache)
    entries.pop(key, None)
    entries[key] = value
    kept = [[name, hashed] for name, hashed in entries.items()][-MAX_ENTRIES:]
    try:
        Path(cache).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(cache, json.dumps({"entries": kept, "version": VERSION}).encode())
    except OSError:
        return False
    return True


def _entries(cache: PathLike) -> Dict[str, str]:
    """The cache's valid entries, in the file's order; {} for anything that is not this version's cache."""
    try:
        data = json.loads(read_bounded_text(cache, MAX_BYTES))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("entries"), list):
        return {}
    return {entry[0]: entry[1] for entry in data["entries"]
            if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
            and isinstance(entry[1], str) and HASH_PATTERN.match(entry[1])}
