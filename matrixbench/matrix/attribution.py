"""Whose change is it? Bridge images for splitting a version change into torch's and transformers' share.

For each pair of images the report compares (consecutive in matrix order) that differ in torch and in
transformers, ``derive(matrix)`` makes the missing corners of the 2x2: the torch of one side with the
transformers of the other (``Bridge``). A bridge takes everything that goes with torch from its torch
side (the torch pin, its index, the Python, the base image, the extra pins: numpy<2 is torch
2.0/2.1's) and the transformers pin from the other; extra indexes and env are both sides' (the torch
side's win). It is named ``<torch side>-torch.<transformers side>-transformers`` and is built, run and
recorded like any image.

A corner that cannot exist is a ``Refused`` with its reason, from the transformers wheel's own metadata
(``Requires-Python``; the ``torch`` extra's torch requirement, e.g. transformers 5.23 wants torch>=2.6):
it is not built, and the report's split uses the path through the corner that exists. The metadata
comes from the shared wheelhouse (``pip download --no-deps`` of the one small wheel when it lacks it);
when it cannot be had, the corner is built and pip's resolver or the model's build has the last word.
"""
from __future__ import annotations

import email.parser
import subprocess
import sys
import zipfile
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Tuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from matrixbench.build.versions import pinned_version
from matrixbench.build.wheelhouse import wheelhouse_dir

# transformers' pin -> its wheel's METADATA text, or None when it cannot be had
MetadataSource = Callable[[str], Optional[str]]


@dataclass(frozen=True)
class Bridge:
    """A derived corner: the torch (and Python) of ``torch_of`` with the transformers of ``transformers_of``."""

    name: str
    torch_of: str
    transformers_of: str


@dataclass(frozen=True)
class Refused:
    """A corner that cannot exist, and why."""

    name: str
    torch_of: str
    transformers_of: str
    reason: str


def bridge_name(torch_of: str, transformers_of: str) -> str:
    return f"{torch_of}-torch.{transformers_of}-transformers"


def mixed_pairs(images) -> List[Tuple[str, str]]:
    """(earlier, later) image names, consecutive in matrix order, that differ in torch and transformers."""
    entries = list(images.values())
    return [(a.name, b.name) for a, b in zip(entries, entries[1:])
            if a.torch != b.torch and a.transformers != b.transformers]


def derive(matrix, metadata: MetadataSource):
    """The matrix with its bridge images added after its own (and ``bridges``/``refused`` set)."""
    images = dict(matrix.images)
    bridges: Dict[str, Bridge] = {}
    refused: Dict[str, Refused] = {}
    for before, after in mixed_pairs(matrix.images):
        for torch_of, transformers_of in ((after, before), (before, after)):
            name = bridge_name(torch_of, transformers_of)
            if name in bridges or name in refused or name in images:
                continue
            image = bridge_image(images[torch_of], images[transformers_of], name)
            reason = corner_problem(image, metadata(image.transformers))
            if reason:
                refused[name] = Refused(name, torch_of, transformers_of, reason)
            else:
                bridges[name] = Bridge(name, torch_of, transformers_of)
                images[name] = image
    return replace(matrix, images=images, bridges=tuple(bridges.values()), refused=tuple(refused.values()))


def bridge_image(torch_side, transformers_side, name):
    """The Image of a corner: torch, its index, Python and base image of one side, transformers of the other."""
    return replace(
        torch_side, name=name, transformers=transformers_side.transformers,
        extra_index_urls=tuple(dict.fromkeys(torch_side.extra_index_urls + transformers_side.extra_index_urls)),
        env={**transformers_side.env, **torch_side.env},
        description=(f"Attribution bridge: the torch of {torch_side.name} ({torch_side.torch}, Python "
                     f"{torch_side.python}) with the transformers of {transformers_side.name} "
                     f"({transformers_side.transformers})."),
        published="none")


def corner_problem(image, metadata_text: Optional[str]) -> Optional[str]:
    """Why transformers' own metadata rules this corner out (its Python, its torch), or None."""
    if metadata_text is None:
        return None
    message = email.parser.Parser().parsestr(metadata_text, headersonly=True)
    version = message.get("Version", "")
    problems = []
    requires_python = message.get("Requires-Python")
    if requires_python and not _allows(requires_python, image.python):
        problems.append(f"it requires Python {requires_python}, and the torch side's Python is {image.python}")
    torch_version = pinned_version(image.torch)
    wanted = _torch_requirement(message.get_all("Requires-Dist") or [])
    if torch_version and wanted is not None and not wanted.specifier.contains(torch_version, prereleases=True):
        problems.append(f"it requires torch{wanted.specifier} (its metadata's torch extra), and the torch "
                        f"side pins {image.torch}")
    if not problems:
        return None
    return f"transformers {version or image.transformers}: " + "; ".join(problems)


def _allows(specifier, python):
    try:
        return SpecifierSet(specifier).contains(python, prereleases=True)
    except InvalidSpecifier:
        return True


def _torch_requirement(requires_dist) -> Optional[Requirement]:
    for line in requires_dist:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name == "torch" and requirement.marker is not None \
                and requirement.marker.evaluate({"extra": "torch"}) and str(requirement.specifier):
            return requirement
    return None


def wheel_metadata(transformers_spec: str, *, environ=None) -> Optional[str]:
    """The METADATA of the pinned transformers wheel, from the wheelhouse (downloaded there, without
    dependencies, when it lacks it); None for a pin that names no exact version or a failed download."""
    version = pinned_version(transformers_spec)
    if version is None:
        return None
    folder = wheelhouse_dir(environ)
    wheel = _wheel_in(folder, version)
    if wheel is None:
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "--dest", str(folder), f"transformers=={version}"],
                       capture_output=True, text=True, check=False, timeout=600)
        wheel = _wheel_in(folder, version)
    if wheel is None:
        return None
    with zipfile.ZipFile(wheel) as archive:
        name = next(item for item in archive.namelist() if item.endswith(".dist-info/METADATA"))
        return archive.read(name).decode("utf-8", errors="replace")


def _wheel_in(folder, version):
    found = sorted(folder.glob(f"transformers-{version}-*.whl")) if folder.is_dir() else []
    return found[0] if found else None


def describe(matrix, cells_per_image: int) -> List[str]:
    """What attribution costs and what it could not build: the lines `run --dry-run` prints."""
    if not matrix.attribution:
        return []
    own = len(matrix.images) - len(matrix.bridges)
    processes = _processes(matrix.repeats)
    lines = [f"attribution: {len(matrix.bridges)} bridge image(s) to build beside the matrix's {own}, "
             f"{len(matrix.bridges) * cells_per_image} extra cell(s) ({cells_per_image} per image{processes})"]
    lines += [f"  bridge {b.name}: torch of {b.torch_of}, transformers of {b.transformers_of}" for b in matrix.bridges]
    lines += [f"  cannot exist {r.name}: {r.reason}" for r in matrix.refused]
    if not mixed_pairs({name: image for name, image in matrix.images.items()
                        if name not in {b.name for b in matrix.bridges}}):
        lines.append("  no compared pair of images differs in both torch and transformers: nothing to split")
    return lines


def _processes(repeats) -> str:
    if isinstance(repeats, int):
        return f", {repeats} processes each" if repeats > 1 else ""
    return f", repeats {repeats} processes each"   # "auto": as many as the comparisons need
