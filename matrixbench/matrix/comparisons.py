"""Which cells are compared, listed once: what ``repeats: auto`` plans for (executors.adaptive) and what
every view of the report judges (comparisons.csv, the tables, the charts, the verdict counts, the costs).

Within a group of images that compare (the planner: one GPU type; the report: one device), each in
matrix order:

- ``speedup``: a compiled cell against the eager cell of the same other axes (runner.axes.speedup_baseline);
- ``mode_change``: a compiled cell against the ``default`` cell of the same other axes, fullgraph
  included (runner.axes.mode_change_baseline);
- ``image_change``: a cell against the same cell in the previous image of the chain (the images but A/A
  twins and attribution's bridges);
- ``aa_change``: an A/A twin's cell (``run --aa``) against its original's;
- ``bridge_step``: with attribution, each step of a mixed image change through a bridge that ran
  (earlier image -> bridge, bridge -> later image): what the torch and transformers shares are made of.

Cells match by their cell id (runner.axes: the axes that name a cell; context such as the attention
asked for is no part of it). Stdlib only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from runner import axes
from runner.core import Cell

SPEEDUP, MODE_CHANGE, IMAGE_CHANGE, AA_CHANGE, BRIDGE_STEP = (
    "speedup", "mode_change", "image_change", "aa_change", "bridge_step")
KINDS = (SPEEDUP, MODE_CHANGE, IMAGE_CHANGE, AA_CHANGE, BRIDGE_STEP)
# The kinds judged paired by round on the rounds both sides ran in one run (report.stats.judge_sides,
# for the report and the waves of repeats auto alike): two images' cells, and a mode against default. A speed-up's
# paired view is its paired blocks; a bridge step's shares are contrasts of three or four cells.
PAIRED_KINDS = (IMAGE_CHANGE, AA_CHANGE, MODE_CHANGE)
# The kinds whose candidate has one baseline at most (a bridge is the later side of one step and the
# earlier of another, and the later image of two).
SINGLE = (SPEEDUP, MODE_CHANGE, IMAGE_CHANGE, AA_CHANGE)

Side = Tuple[str, Cell]             # (image label, cell)


@dataclass(frozen=True)
class Comparison:
    """One comparison, as two sides (image label, cell)."""

    kind: str
    baseline: Side
    candidate: Side

    def describe(self) -> str:
        (image_a, cell_a), (image_b, cell_b) = self.baseline, self.candidate
        return f"{image_b}/{cell_b.id} vs {image_a}/{cell_a.id}"

    def key(self) -> Tuple[str, str, str, str, str]:
        """(kind, baseline image, baseline cell id, candidate image, candidate cell id)."""
        return (self.kind, self.baseline[0], self.baseline[1].id, self.candidate[0], self.candidate[1].id)


@dataclass(frozen=True)
class ImageCells:
    """One image's cells in a group: ``label`` names its sides, ``name`` is the matrix's image name."""

    label: str
    name: str
    cells: Sequence[Cell]


@dataclass(frozen=True)
class Roles:
    """What the matrix says of its images: A/A twins ({twin: original}) and attribution's bridges
    ({(torch of, transformers of): bridge name})."""

    twins: Mapping[str, str] = field(default_factory=dict)
    bridges: Mapping[Tuple[str, str], str] = field(default_factory=dict)

    @property
    def bridge_names(self) -> frozenset[str]:
        return frozenset(self.bridges.values())

    def chain(self, names: Iterable[str]) -> List[str]:
        """The images an image change chains, in order: all but A/A twins and bridges."""
        return [name for name in names if name not in self.twins and name not in self.bridge_names]


def roles_of(matrix: object) -> Roles:
    """A Matrix's roles: its images' ``build_of`` (A/A twins) and its ``bridges``."""
    images: Mapping[str, Any] = getattr(matrix, "images", {})
    twins = {name: str(image.build_of) for name, image in images.items() if getattr(image, "build_of", None)}
    bridges = {(bridge.torch_of, bridge.transformers_of): bridge.name for bridge in getattr(matrix, "bridges", ())}
    return Roles(twins, bridges)


def comparisons(groups: Iterable[Sequence[ImageCells]], roles: Optional[Roles] = None) -> List[Comparison]:
    """Every comparison among the groups' images (each group's images in matrix order)."""
    roles = roles or Roles()
    found: List[Comparison] = []
    for images in groups:
        found += _in_group(list(images), roles)
    return list(dict.fromkeys(found))


def _in_group(images: List[ImageCells], roles: Roles) -> List[Comparison]:
    by_name = {image.name: image for image in images}
    ids = {image.name: {cell.id: cell for cell in image.cells} for image in images}
    found: List[Comparison] = []
    for image in images:
        present = ids[image.name]
        for cell in image.cells:
            for kind, wanted in ((SPEEDUP, axes.speedup_baseline(cell)),
                                 (MODE_CHANGE, axes.mode_change_baseline(cell))):
                baseline = present.get(wanted.id) if wanted is not None else None
                if baseline is not None:
                    found.append(Comparison(kind, (image.label, baseline), (image.label, cell)))
    chain = [by_name[name] for name in roles.chain(by_name)]
    for before, after in zip(chain, chain[1:]):
        found += _pairs(IMAGE_CHANGE, before, after, ids)
        for corner in ((after.name, before.name), (before.name, after.name)):
            bridge = by_name.get(roles.bridges.get(corner, ""))
            if bridge is not None:
                found += _pairs(BRIDGE_STEP, before, bridge, ids) + _pairs(BRIDGE_STEP, bridge, after, ids)
    for image in images:
        original = by_name.get(roles.twins.get(image.name, ""))
        if original is not None:
            found += _pairs(AA_CHANGE, original, image, ids)
    return found


def _pairs(kind: str, before: ImageCells, after: ImageCells, ids: Mapping[str, Mapping[str, Cell]]) -> List[Comparison]:
    """Each cell of ``after`` against the same cell (by id) of ``before``."""
    earlier = ids[before.name]
    return [Comparison(kind, (before.label, earlier[key]), (after.label, cell))
            for key, cell in ids[after.name].items() if key in earlier]


class Baselines:
    """The list looked up: the baseline side of a candidate side for each SINGLE kind."""

    def __init__(self, found: Sequence[Comparison]):
        self.comparisons = list(found)
        self._by: Dict[Tuple[str, str, str], Side] = {
            (c.kind, c.candidate[0], c.candidate[1].id): c.baseline for c in self.comparisons if c.kind in SINGLE}

    def of(self, kind: str, image: str, cell_id: str) -> Optional[Side]:
        return self._by.get((kind, image, cell_id))
