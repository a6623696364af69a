"""Resume and order: which repeats of a run's cells still need running, per image, and in
what order.

Records land in ``results/<run>/<image>/<cell_id>.json`` (repeat 0) and ``<cell_id>.r<k>.json``;
with a GPU-type axis (``gpu_types``, --executor ray) in ``results/<run>/<gpu_type>/<image>/``: one
folder per GPU type and image, so resume stays a per-folder question, exactly as without the axis;
``runner.schema.needs_run`` is the one rule that says whether a repeat needs running again (no
record, an unreadable one, ``--force``, or a failed one with ``--retry-failed``); each repeat
counts alone, so a run stopped after repeat 2 of 3 runs only repeat 3.

The order (``interleaved``): every cell's repeat 0, then every cell's repeat 1, ..., so a slow
drift of the machine spreads over all cells; within a repeat, the modes of each model (same
batch size and dtype) in an order shuffled with ``random.Random(seed)`` and reversed on odd
repeats (counterbalanced), the seed recorded in run.json and the cells file. Every image gets the
same order, and the images take turns repeat by repeat, their order reversed on odd repeats
(``matrixbench.executors.scheduler.rounds``: one runner per image and repeat index); run.json's ``order``
says where each process ran.
"""
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Hashable, Iterator, List, Optional, Sequence, Tuple, TypeVar

from matrixbench.errors import ResumeConflictError
from matrixbench.matrix import Matrix, cells_by_image
from matrixbench.run.layout import image_dir
from matrixbench.run.results_files import Unvouched, read_record
from runner.cells_file import schedule_pairs
from runner.core import Cell, Repeat
from runner.schema import NewerRecordError, RecordError, needs_run, record_path


@dataclass(frozen=True)
class ImageWork:
    """One image's share of a run: all its cells, all their repeats in run order, and the
    repeats still to run (Repeats, in run order)."""

    image_name: str
    out_dir: Path
    cells: List[Cell]
    pending: List[Repeat]
    recorded_failures: int = 0   # repeats skipped because recorded, whose record is a failure
    unreadable: Tuple[Tuple[Path, str], ...] = ()   # (record path, why) of pending repeats whose record is corrupt
    repeats: Tuple[Repeat, ...] = ()              # every repeat of every cell, in run order; () = each cell once
    order_seed: Optional[int] = None
    gpu_type: Optional[str] = None   # the GPU type it runs on (the gpu_types axis); None: no axis

    @property
    def label(self) -> str:
        """The image's name, led by its GPU type where the run has that axis: "A100/stable" (``image_label``)."""
        return image_label(self.image_name, self.gpu_type)

    @property
    def all(self) -> List[Repeat]:
        return list(self.repeats) or [Repeat(cell) for cell in self.cells]

    @property
    def done(self) -> int:
        return len(self.all) - len(self.pending)

    def schedule(self) -> Tuple[List[Cell], List[List[int]]]:
        """The pending repeats as the cells file says them: (cells, [cell index, repeat] pairs)."""
        return schedule_pairs(self.pending)


def image_label(image_name: str, gpu_type: Optional[str]) -> str:
    """An image's work's label: its name, led by its GPU type where the run has that axis ("A100/stable"); a Ray
    task's node names its images' parts the same way (executors/ray/tasks.py)."""
    return image_name if gpu_type is None else f"{gpu_type}/{image_name}"


def new_order_seed() -> int:
    """A fresh seed for the order of one invocation of a run."""
    return random.SystemRandom().randrange(2**31)


def first_repeats(matrix: Matrix) -> int:
    """The processes every cell gets before any is judged: repeats, or repeats_min with repeats auto
    (matrixbench.executors.adaptive adds the rest)."""
    return matrix.repeats_min if matrix.repeats == "auto" else int(matrix.repeats)


def pending_work(matrix: Matrix, run_path: Path, *, force: bool = False, retry_failed: bool = False,
                 order_seed: int = 0) -> List[ImageWork]:
    """One ImageWork per image of ``matrix``, in the matrix's image order; with a GPU-type axis,
    one per GPU type and image (types in the matrix's order), each in its own folder."""
    return [
        _image_work(name, cells, image_dir(run_path, name, gpu_type), force, retry_failed,
                    interleaved(cells, first_repeats(matrix), order_seed), order_seed, gpu_type)
        for gpu_type in (matrix.gpu_types or (None,))
        for name, cells in cells_by_image(matrix).items()
    ]


T = TypeVar("T")


def round_order(items: Sequence[T], index: int) -> List[T]:
    """``items`` in the order they take in round (repeat index) ``index``: as given on even rounds,
    reversed on odd ones (ABBA): over two rounds every item's mean position is the same, so a linear
    drift adds the same to each. The one counterbalancing rule, for images
    (``executors.scheduler.rounds``) and for the modes of a model (``interleaved``)."""
    return list(items) if index % 2 == 0 else list(reversed(items))


def interleaved(cells: Sequence[Cell], repeats: int, seed: Optional[int]) -> List[Repeat]:
    """Every repeat of every cell in run order: repeat by repeat; within one, each model's modes
    (cells equal but for the mode) in an order shuffled once by ``random.Random(seed)`` and
    counterbalanced from repeat to repeat (``round_order``: reversed on odd repeats), so
    a drift within a runner cancels out of a mode-vs-mode comparison; models in matrix order."""
    rng = random.Random(seed)
    groups = _mode_groups(cells)
    for group in groups:
        rng.shuffle(group)
    return [Repeat(cell, index) for index in range(repeats) for group in groups
            for cell in round_order(group, index)]


def _mode_groups(cells: Sequence[Cell]) -> List[List[Cell]]:
    groups: Dict[Tuple[Tuple[str, Hashable], ...], List[Cell]] = {}
    for cell in cells:
        key = tuple((name, value) for name, value in cell.to_dict().items() if name != "mode")
        groups.setdefault(key, []).append(cell)
    return [list(group) for group in groups.values()]


def _image_work(name: str, cells: List[Cell], out_dir: Path, force: bool, retry_failed: bool, repeats: List[Repeat],
                order_seed: int, gpu_type: Optional[str] = None) -> ImageWork:
    """One image's work; linear in its repeats (one look at each record)."""
    needed = {r.id for r in repeats if _needs_run(out_dir, r, force, retry_failed)}
    statuses = {r.id: _recorded_status(out_dir, r) for r in repeats if r.id not in needed}
    # a record matrixbench.run.results_files cannot vouch for (status None: a NaN or negative value, a wrong
    # type) is rerun and replaced, as an unreadable one is: it is never the cell's measurement
    pending = [r for r in repeats if r.id in needed or statuses[r.id] is None]
    failures = sum(status is not None and status != "ok" for status in statuses.values())
    return ImageWork(image_name=name, out_dir=out_dir, cells=cells, pending=pending,
                     recorded_failures=failures, unreadable=tuple(_unreadable(out_dir, pending)),
                     repeats=tuple(repeats), order_seed=order_seed, gpu_type=gpu_type)


def _needs_run(out_dir: Path, repeat: Repeat, force: bool, retry_failed: bool) -> bool:
    """runner.schema.needs_run; a record of a newer matrixbench refuses the run, naming the file."""
    try:
        return needs_run(out_dir, repeat.cell, force, retry_failed, repeat=repeat.index)
    except NewerRecordError as exc:
        raise ResumeConflictError(str(exc)) from None


def _unreadable(out_dir: Path, repeats: Sequence[Repeat]) -> Iterator[Tuple[Path, str]]:
    for repeat in repeats:
        path = record_path(out_dir, repeat.cell, repeat.index)
        if os.path.lexists(path):
            try:
                read_record(path)
            except RecordError as exc:   # why, without the path the line names already (Unvouched.problem)
                yield path, exc.problem if isinstance(exc, Unvouched) else str(exc)


def unreadable_lines(work: ImageWork) -> List[str]:
    """What a rerun says of each corrupt record it replaces."""
    return [f"{path}: unreadable record, its cell reruns and replaces it ({why})" for path, why in work.unreadable]


def _recorded_status(out_dir: Path, repeat: Repeat) -> Optional[str]:
    try:
        return str(read_record(record_path(out_dir, repeat.cell, repeat.index))["status"])
    except RecordError:
        return None


def recorded_failures_line(count: int) -> str:
    """What a rerun says of the failures it skips."""
    return f"{count} recorded cells are failures; --retry-failed reruns them"
