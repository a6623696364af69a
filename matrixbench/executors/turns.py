"""Image changes in turns (matrix setting ``turns``; docs/turns.md, issue 34): which runners of a sequential run
start at once, in pairs, and take turns over a baton (runner.baton) instead of running one after the other.

The pairs are the images of the matrix's image comparisons (``image_pairs``: the one list of comparisons,
``matrixbench.matrix.comparisons``, whose two sides are two images), disjoint, in the list's order: a chain
A -> B -> C pairs A with B and leaves C alone. In each round (``scheduler.rounds``: one repeat index) a pair's two
runners get the repeats both still need, in one order (``round_steps``); the pair's baseline takes the ``first``
role in even rounds and the candidate in odd ones, so neither image always starts; each pair launch gets an id of
its own. A repeat only one side needs (the other's is recorded: a resumed run) runs alone, as without turns.
With ``turns_cores`` N, every pair's blocks are pinned to the same N cores (``pinned_cores``: the last N this run
may use; one pair runs at a time). In slots (the slots executor) a unit's pairs run in its slot, both runners
placed there, their blocks pinned to the slot's last N cores (``slot_cores``). On a Ray cluster (the ray executor)
a unit's task carries the unit's pairs (``pairs_of``, by label) and runs ``steps_of`` its parts on its node, both
runners of a pair in its GPU's share of the node, their blocks on that share's last N cores.

Pure functions over the run's works: the sequential executor runs ``steps``, the slots executor and a Ray task
``steps_of`` each unit, and ``run --dry-run`` prints them (``launches``); and ``take_turns``, the one way a pair's
two runners start at once (each executor gives it its own way to launch one side).
"""
import functools
import shutil
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import (
    Callable,
    Dict,
    Generic,
    Iterable,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Set,
    Tuple,
    TypeVar,
    Union,
)

from matrixbench.environments.base import Turns
from matrixbench.errors import OptionConflictError
from matrixbench.executors.scheduler import Part, make_units, rounds, run_order
from matrixbench.executors.threads import run_threads
from matrixbench.matrix.comparisons import Comparison
from matrixbench.run.layout import turns_dir
from matrixbench.run.pending import ImageWork
from matrixbench.run.placement import Slot, format_cpulist, usable_cores
from runner.baton import ROLES, ended_marker
from runner.core import Repeat

FIRST, SECOND = ROLES
Pair = Tuple[str, str]   # (baseline image label, candidate image label)


class Paired(Protocol):
    """What takes a side of a pair: an image's work under its label (``pending.ImageWork`` on the driver; a Ray
    task's ``tasks.NodeWork`` on its node), whose image name the partner's runner is told."""

    @property
    def label(self) -> str: ...

    @property
    def image_name(self) -> str: ...


PW = TypeVar("PW", bound=Paired)


@dataclass(frozen=True)
class Side(Generic[PW]):
    """One runner of a pair in turns: its image's work, the repeats it runs (the pair's, in the pair's order), its
    role (``first``/``second``) and its partner's image name."""

    work: PW
    repeats: List[Repeat]
    role: str
    partner: str


@dataclass(frozen=True)
class TurnPair(Generic[PW]):
    """Two runners started at once that take turns on the same repeats: ``sides`` (first, second) and ``pair_id``,
    the pair launch's own (its baton folder's name, the records' ``timing.turns.pair_id``)."""

    pair_id: str
    sides: Tuple[Side[PW], Side[PW]]


Step = Union[Part[PW], TurnPair[PW]]   # a runner alone (image work, repeats), or a pair in turns


def last_cores(count: int, cores: Sequence[int], refusal: Callable[[int], str]) -> Tuple[int, ...]:
    """The cores a pair's blocks are pinned to (matrix setting ``turns_cores`` ``count``): the last ``count`` of
    ``cores`` (core 0 takes most interrupts); () for 0. Raises OptionConflictError with ``refusal(len(cores))``,
    which names the setting and where, when there are fewer. One machine's (``pinned_cores``), a slot's
    (``slot_cores``) and a Ray task's share of its node (``tasks.turns_cores_here``) all pin this way."""
    if count <= 0:
        return ()
    if count > len(cores):
        raise OptionConflictError(refusal(len(cores)))
    return tuple(sorted(cores)[-count:])


def pinned_cores(count: int, usable: Optional[Sequence[int]] = None) -> Tuple[int, ...]:
    """The cores a pair's blocks are pinned to on one machine (the sequential executor): the last ``count`` of
    ``usable`` (default: this run's, run.placement.usable_cores)."""
    if count <= 0:
        return ()
    cores = usable_cores()[0] if usable is None else usable
    return last_cores(count, cores, lambda have: (
        f"turns_cores: {count}: this run may use {have} CPU core(s) ({format_cpulist(cores)}); set "
        f"turns_cores to at most {have} (--set turns_cores={have}), or 0 not to pin"))


def slot_cores(count: int, slots: Sequence[Slot]) -> Dict[int, Tuple[int, ...]]:
    """The cores each slot's pairs pin their blocks to (``turns_cores`` ``count``, the slots executor): the last
    ``count`` of the slot's (by slot index; () for 0). Raises OptionConflictError, naming the setting and the
    smallest slot, when a slot has fewer."""
    def refusal(slot: Slot) -> Callable[[int], str]:
        return lambda have: (
            f"turns_cores: {count}: slot {slot.index} has {have} CPU core(s) ({slot.cpuset}), and a pair in turns "
            f"pins its blocks within its slot's; set turns_cores to at most {have} (--set turns_cores={have}), "
            "fewer slots, or 0 not to pin")

    by_size = sorted(slots, key=lambda slot: len(slot.cores))   # the smallest first: the refusal names it
    return {slot.index: last_cores(count, slot.cores, refusal(slot)) for slot in by_size}


def new_pair_id() -> str:
    """A pair launch's id: unique per launch (uuid4 hex)."""
    return uuid.uuid4().hex


def image_pairs(comparisons: Iterable[Comparison]) -> List[Pair]:
    """The images that take turns: the (baseline, candidate) image labels of ``comparisons`` whose sides are two
    images (image changes, A/A changes, bridge steps), each image in one pair at most, in the list's order."""
    pairs: List[Pair] = []
    taken: Set[str] = set()
    for comparison in comparisons:
        pair = (comparison.baseline[0], comparison.candidate[0])
        if pair[0] != pair[1] and not taken & set(pair):
            pairs.append(pair)
            taken |= set(pair)
    return pairs


def pairs_of(works: Sequence[ImageWork], matrix: object) -> List[Pair]:
    """The pairs among ``works`` (a run's, a wave's): ``image_pairs`` of the comparisons among their cells, the
    report's and the waves' one list (``adaptive.comparisons``, with the matrix's A/A twins and bridges)."""
    from matrixbench.executors.adaptive import comparisons
    from matrixbench.matrix.comparisons import roles_of

    return image_pairs(comparisons(works, roles_of(matrix)))


def steps(works: Sequence[ImageWork], pairs: Sequence[Pair],
          new_id: Callable[[], str] = new_pair_id) -> List[Step[ImageWork]]:
    """The sequential run's runners in order (``scheduler.rounds`` across the images, one runner at a time), with
    the runners of each pair in ``pairs`` started at once on the repeats both need (``round_steps``)."""
    return steps_of([(work, work.pending) for work in works if work.pending], pairs, new_id)


def steps_of(parts: Sequence[Part[PW]], pairs: Sequence[Pair],
             new_id: Callable[[], str] = new_pair_id) -> List[Step[PW]]:
    """``parts`` (image work, repeats: a run's, or a unit's, ``scheduler.Unit.parts``; on a Ray node, the task's)
    as they start: round by round (``scheduler.rounds``), the runners of each pair in ``pairs`` at once on the
    repeats both need (``round_steps``). Without pairs, ``scheduler.rounds`` itself."""
    by_round: Dict[int, List[Part[PW]]] = {}
    for work, repeats in rounds(parts):
        by_round.setdefault(repeats[0].index, []).append((work, repeats))
    return [step for index, parts in by_round.items() for step in round_steps(parts, pairs, index, new_id)]


def launches(works: Sequence[ImageWork], matrix: object, units: bool,
             torch_of: Optional[Mapping[str, Optional[str]]] = None) -> List[Step[ImageWork]]:
    """What a run starts, in order (``scheduler.run_order``'s order): with ``turns``, the pairs' runners at once
    (``steps``; in units, ``steps_of`` each unit, as the slots executor runs them). A pair starts its two runners
    at once, so the bill counts it as one runner start."""
    if not getattr(matrix, "turns", False):
        return list(run_order(works, units, torch_of))
    pairs = pairs_of(works, matrix)
    if not units:
        return steps(works, pairs)
    return [step for unit in make_units(works, torch_of) for step in steps_of(unit.parts, pairs)]


def round_steps(parts: Sequence[Part[PW]], pairs: Sequence[Pair], index: int,
                new_id: Callable[[], str] = new_pair_id) -> List[Step[PW]]:
    """One round's runners (``parts``: its (image work, repeats) in the round's order) as they start: at the
    place of a pair's first image in the round, the pair in turns on the repeats both sides have (by cell id, in
    the baseline's order; ``first``: the baseline in even rounds, the candidate in odd ones), then at each image's
    own place its repeats the other side lacks, alone."""
    by_label = {work.label: (work, repeats) for work, repeats in parts}
    partner_of = {label: pair for pair in pairs for label in pair if all(side in by_label for side in pair)}
    shared = {pair: _shared(by_label[pair[0]][1], by_label[pair[1]][1]) for pair in set(partner_of.values())}
    found: List[Step[PW]] = []
    started: Set[Pair] = set()
    for work, repeats in parts:
        pair = partner_of.get(work.label)
        common = shared.get(pair, []) if pair else []
        if pair is not None and common and pair not in started:
            started.add(pair)
            found.append(_turn_pair(by_label[pair[0]], by_label[pair[1]], common, index, new_id()))
        taken = {repeat.cell.id for repeat in common}
        alone = [repeat for repeat in repeats if repeat.cell.id not in taken]
        if alone:
            found.append((work, alone))
    return found


def _shared(baseline: Sequence[Repeat], candidate: Sequence[Repeat]) -> List[Repeat]:
    """The baseline's repeats whose cell (by id) the candidate's repeats have too, in the baseline's order."""
    wanted = {repeat.cell.id for repeat in candidate}
    return [repeat for repeat in baseline if repeat.cell.id in wanted]


def _turn_pair(baseline: Part[PW], candidate: Part[PW], common: Sequence[Repeat], index: int,
               pair_id: str) -> TurnPair[PW]:
    """The pair's two sides on ``common`` (the baseline's repeats; the candidate runs its own repeats of the same
    cell ids, in that order); ``first``: the baseline on even rounds, the candidate on odd ones."""
    own = {repeat.cell.id: repeat for repeat in candidate[1]}
    base_work, cand_work = baseline[0], candidate[0]
    base = (base_work, list(common), cand_work.image_name)
    cand = (cand_work, [own[repeat.cell.id] for repeat in common], base_work.image_name)
    first, second = (base, cand) if index % 2 == 0 else (cand, base)
    return TurnPair(pair_id, (Side(first[0], first[1], FIRST, first[2]), Side(second[0], second[1], SECOND, second[2])))


def pinned_text(count: int, units: bool, ray: bool = False) -> str:
    """Where a pair's blocks are pinned (``turns_cores`` ``count``), for ``run --dry-run``: "cores 7" (one runner at
    a time: ``pinned_cores``), "the last 2 cores of its slot" (in units: each slot's own, ``slot_cores``), on a Ray
    cluster (``ray``) the last of its task's share of its node (checked against the nodes as the run starts); ""
    for 0."""
    if count <= 0:
        return ""
    if ray:
        return f"the last {count} core(s) of its task's share of its node"
    if units:
        return f"the last {count} core(s) of its slot"
    return f"cores {format_cpulist(pinned_cores(count))}"


def describe(step: Step[ImageWork], pinned: str = "") -> List[Tuple[ImageWork, Repeat, Optional[str]]]:
    """A step's processes as (image work, repeat, how it runs: "in turns with <partner>, <role>[, blocks pinned to
    cores C]" or None alone), for ``run --dry-run``; ``pinned``: where the pairs' blocks are (``pinned_text``)."""
    if isinstance(step, TurnPair):
        pinned = f", blocks pinned to {pinned}" if pinned else ""
        return [(side.work, repeat, f"in turns with {side.partner}, {side.role}{pinned}")
                for side in step.sides for repeat in side.repeats]
    work, repeats = step
    return [(work, repeat, None) for repeat in repeats]


def take_turns(pair: TurnPair[PW], root: Path, cores: Tuple[int, ...], launch: Callable[[Side[PW], Turns], None],
               stop: Callable[[], None]) -> None:
    """Both runners of ``pair`` at once: the one way a pair starts, on one machine (the sequential and slots
    executors: ``sequential.run_pair``) or on a Ray task's node (``ray.tasks``). Each side's ``launch(side, turns)``
    runs its runner to its end (blocking) in a thread of its own (``threads.run_threads``: ``stop`` stops the runners
    on Ctrl-C, or a Ray task's cancel), both sharing the baton folder ``<root>/.turns/<pair_id>`` (``turns_dir``:
    the run folder, or the task's scratch folder on its node), removed once both are done, their blocks pinned to
    ``cores`` (none: not pinned). A side that raises stops neither its partner nor its records: both run to their
    end, then the first error passes on. A side's runner that ends (or never started) leaves its ended marker
    there, so its partner does not wait ``timeout_s`` to meet it."""
    folder = turns_dir(root, pair.pair_id)
    folder.mkdir(parents=True, exist_ok=True)
    for side in pair.sides:   # a killed run's: this pair's runners have not ended
        ended_marker(folder, side.role).unlink(missing_ok=True)

    def start(side: Side[PW], stopping: threading.Event) -> None:
        try:
            launch(side, Turns(side.role, side.partner, pair.pair_id, folder, cores))
        finally:   # its partner, waiting to meet it, goes on alone at once (runner.baton.ended_marker)
            ended_marker(folder, side.role).touch()

    try:
        run_threads([functools.partial(start, side) for side in pair.sides], stop,
                    [f"turns-{side.role}" for side in pair.sides])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
