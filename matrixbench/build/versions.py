"""Versions and requirements on the host: one module, with ``packaging`` (the runner has its
stdlib counterpart, runner.versions).

- ``pinned_version("torch==2.0.1")`` -> "2.0.1"; None when the requirement is not one exact pin;
- ``torch_label(spec)``: what an image's torch label says (the pin, else the specifier, else "any");
- ``same_release(a, b)``: the same public version, local build tags ("+cu118") aside;
- ``public(version)``: the version without its local build tag ("2.0.1+cu118" -> "2.0.1");
- ``release(version)``: the release numbers, for sorting ("2.10.0" after "2.4.1").
"""
from __future__ import annotations

from typing import Optional, Tuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version


def pinned_version(requirement: str) -> Optional[str]:
    """The version one exact pin names: "torch==2.0.1" -> "2.0.1"; None for ranges, wildcards, none."""
    try:
        specifiers = list(Requirement(requirement).specifier)
    except InvalidRequirement:
        return None
    if len(specifiers) == 1 and specifiers[0].operator in ("==", "===") and "*" not in specifiers[0].version:
        return specifiers[0].version
    return None


def torch_label(requirement: str) -> str:
    """The torch an image is built for, as its label says it: "2.0.1", ">=2.1,<2.2", or "any"."""
    pinned = pinned_version(requirement)
    if pinned is not None:
        return pinned
    try:
        return str(Requirement(requirement).specifier) or "any"
    except InvalidRequirement:
        return requirement


def same_release(installed: str, pinned: str) -> bool:
    """Whether two versions are the same public version: "2.13.0+cpu" is "2.13.0"."""
    try:
        return Version(installed).public == Version(pinned).public
    except InvalidVersion:
        return installed.split("+", 1)[0] == pinned.split("+", 1)[0]


def public(version: str) -> str:
    """A version without its local build tag: "2.0.1+cu118" -> "2.0.1"."""
    try:
        return Version(str(version)).public
    except InvalidVersion:
        return str(version).split("+", 1)[0]


def release(version: str) -> Tuple[int, ...]:
    """A version's release numbers, for ordering: "2.1.0.dev20230601+cu118" -> (2, 1, 0); () if none."""
    try:
        return Version(str(version)).release
    except InvalidVersion:
        return ()
