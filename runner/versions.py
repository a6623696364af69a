"""Torch (and other) version strings as comparable numbers, inside the stdlib-only runner.

"2.10.0" > "2.4" as strings is False; as release tuples (2, 10, 0) > (2, 4) it is True. Only the
release part counts: "2.4.0.dev20240601+cu121" and "2.4.0a0+git1234" are release (2, 4, 0), so a
nightly of a release counts as that release (what a feature check wants: the nightly has it).
The host compares versions with ``packaging.version`` (matrixbench.build.versions); this is the runner's
stdlib counterpart.
"""
from __future__ import annotations

import re
from typing import Tuple

_RELEASE = re.compile(r"\s*v?(\d+(?:\.\d+)*)")


def release(version: str) -> Tuple[int, ...]:
    """The release numbers of a version: "2.10.1+cu124" -> (2, 10, 1). ValueError if there are none."""
    match = _RELEASE.match(str(version))
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in match.group(1).split("."))


def at_least(version: str, minimum: str) -> bool:
    """``version``'s release is ``minimum``'s or later, missing parts counting as 0: "2.10" >= "2.4"."""
    have, want = release(version), release(minimum)
    width = max(len(have), len(want))
    return have + (0,) * (width - len(have)) >= want + (0,) * (width - len(want))
