"""Running a run's pending cells on several slots at once (issue 15).

A work unit is one model at one batch size: its pending repeats (every mode, dtype and repeat) in
every image, run by one slot image after image (round by round when cells repeat: ``rounds``), so
a torch-version comparison of a cell (the same cell across images) never mixes two GPUs. Issue 15
proposed one model (all its batch sizes) per unit; the default matrix has only 11 models, too few
to keep 8 slots busy to the end
(benchmarks/results/sim_slots.md: 1.45-1.62x the ideal makespan at 8 slots with one-model units,
1.04-1.21x with model x batch-size units), and no comparison the report makes crosses batch sizes.

Units go longest first (``Estimates``: the duration of the cell's earlier record, in this run or
else the newest earlier run under the same results root, else this run's pace on this machine (the
mean duration of its records of the same mode), else ``MODEL_S`` by mode); each slot is
a thread that takes the next unit when its last one is done. ``make_units`` and ``Unit`` are the
reusable part (a cluster task runs one Unit too).
"""
import functools
import os
import statistics
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import (
    Callable,
    Deque,
    Dict,
    Generic,
    Iterable,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from matrixbench.build.versions import same_release
from matrixbench.executors.threads import run_threads
from matrixbench.run.at_once import AtOnce
from matrixbench.run.layout import NOT_RECORDS
from matrixbench.run.pending import ImageWork, round_order
from matrixbench.run.placement import Slot
from matrixbench.run.progress import Progress
from matrixbench.run.results_files import Unvouched, read_record, warn
from runner.core import Repeat
from runner.energy import ENERGY_MIN_S
from runner.schema import RecordError

# Seconds a cell's process takes when no earlier record says (a new results folder: the bill, the units' order),
# by the matrix's model size: compiled modes compile, eager does not; a compiled cell adds its paired blocks' eager
# loop (generic_s). Durations of earlier records, and this machine's pace, take precedence.
# Full size: full-size GPU cells. Tiny (size: tiny, the CPU smoke matrix): the means of make matrix's 48 processes
# on a 2-core machine (benchmarks/results/model_s_tiny_cpu.md: eager 0.2 s; default 11.5 s with its paired blocks,
# 3.9-38 s, the first compiles the longest), where the full-size model billed 1,920 s for 281 s; reduce-overhead
# and max-autotune were not measured tiny and take the full-size model's ratios to default.
MODEL_S = {"eager": 10.0, "default": 60.0, "reduce-overhead": 75.0, "max-autotune": 300.0}
TINY_EAGER_S = 0.2
TINY_DEFAULT_S = 11.5 - TINY_EAGER_S     # generic_s adds the paired blocks' eager loop back
TINY_MODEL_S = {mode: TINY_EAGER_S if mode == "eager" else TINY_DEFAULT_S * seconds / MODEL_S["default"]
                for mode, seconds in MODEL_S.items()}


# A runner's start (the interpreter, torch's import, the cache: the gap between one runner's last record and the next
# runner's first) where no record of this run, or of the newest earlier run beside it, shows one (Estimates.start_s),
# by the matrix's model size as above. Tiny: make matrix's CPU smoke run (model_s_tiny_cpu.md: 6.7 s, the median
# of its gaps). Full size: the GPU runs committed from an H100 and an H200 VM (the median of their 7 gaps, 8.4-11.2
# s; tests/test_bill_evidence.py measures it again from those records).
RUNNER_START_S = {"tiny": 6.7, "full": 8.8}


def generic_start_s(sizes: Iterable[Optional[str]]) -> float:
    """RUNNER_START_S for runners of cells of these model ``sizes``: tiny only where every one is tiny."""
    sizes = list(sizes)
    return RUNNER_START_S["tiny" if sizes and all(size == "tiny" for size in sizes) else "full"]


def generic_s(mode: str, size: Optional[str] = None, paired: bool = True) -> float:
    """The generic model's seconds for a process of ``mode`` at model ``size`` ("tiny": TINY_MODEL_S, else
    MODEL_S), with the eager loop of the paired blocks a compiled cell adds unless not ``paired``."""
    table = TINY_MODEL_S if size == "tiny" else MODEL_S
    extra = table["eager"] if paired and mode != "eager" else 0.0
    return table.get(mode, max(table.values())) + extra


class Labelled(Protocol):
    """What a runner's records are counted and shown under: an image's work (``pending.ImageWork``), or a
    calibration phase (``calibration.Phase``)."""

    @property
    def label(self) -> str: ...


W = TypeVar("W", bound=Labelled)   # a part's "work": pending.ImageWork, or a calibration.Phase
UnitKey = Tuple[str, int]   # (model, batch size)
Part = Tuple[W, List[Repeat]]   # (image work, its repeats)


@dataclass
class Unit(Generic[W]):
    """One model at one batch size: its pending repeats (runner.core.Repeat) per image, in matrix
    order, as ``[(image work, repeats), ...]``; ``estimate_s`` is their summed estimate."""

    model: str
    batch_size: int
    parts: List[Part[W]]
    estimate_s: float
    slot: Optional[int] = None   # pinned: only the slot of this index runs it (a calibration phase's unit)

    @property
    def key(self) -> UnitKey:
        return (self.model, self.batch_size)

    @property
    def name(self) -> str:
        """"vit bs=4", for logs and progress."""
        return f"{self.model} bs={self.batch_size}"

    @property
    def cells(self) -> int:
        return sum(len(cells) for _, cells in self.parts)

    def rounds(self) -> List[Part[W]]:
        """The unit's runners, in order: its parts round by round (``rounds``)."""
        return rounds(self.parts)


RunUnit = Callable[[Slot, Unit[W], int], None]   # run_unit(slot, unit, busy units)


def rounds(parts: Sequence[Part[W]]) -> List[Part[W]]:
    """``[(image work, repeats), ...]`` as they run: repeat index by repeat index, each image in turn
    within one, counterbalanced (``round_order``: repeat 0 in images A, B, C, repeat 1 in C, B, A,
    ...), so a load that drifts linearly during a run cancels out of every image pair's difference
    instead of favouring the image that always went first. With one repeat per cell this is
    ``parts`` itself."""
    indices = sorted({repeat.index for _, repeats in parts for repeat in repeats})
    return [(work, chosen) for index in indices for work, repeats in round_order(parts, index)
            if (chosen := [repeat for repeat in repeats if repeat.index == index])]


def positions(parts: Sequence[Part[W]]) -> Dict[str, Dict[str, int]]:
    """Where each repeat of ``parts`` (one unit's, or a sequential run's works) runs, for run.json:
    ``"<image label>/<record stem>" -> {"round": repeat index, "image": its image's place in that
    round (0 first), "mode": its place among its model's modes in its runner (0 first)}``."""
    placed: Dict[str, Dict[str, int]] = {}
    seen: Dict[int, int] = {}
    for work, chosen in rounds(parts):
        index = chosen[0].index
        image_position = seen[index] = seen.get(index, -1) + 1
        groups: Dict[Tuple[Tuple[str, object], ...], int] = {}
        for repeat in chosen:
            group = tuple((name, value) for name, value in repeat.cell.to_dict().items() if name != "mode")
            groups[group] = groups.get(group, -1) + 1
            placed[f"{work.label}/{repeat.id}"] = {"round": index, "image": image_position, "mode": groups[group]}
    return placed


def unit_key(repeat: Repeat) -> UnitKey:
    """The unit a repeat belongs to: its cell's model and batch size."""
    return (repeat.cell.model, repeat.cell.batch_size)


def record_duration(path: Path, torch: Optional[str] = None,
                    settings: Optional[Mapping[str, object]] = None) -> Optional[float]:
    """The ``duration_s`` of the record at ``path``; None when it is missing, unreadable, or (with
    ``torch``, a version) it ran another torch release. With ``settings`` (the run's runner settings) the
    duration is what the record's process would take under them (``settings_delta_s``: paired blocks,
    the loop's minimum duration, turns). A process in turns waited for its partner (``timing.turns.waited_s``):
    that is the partner's time, not this process's, and is left out."""
    try:
        record = read_record(path) if os.path.lexists(path) else None
    except Unvouched as exc:   # another run's hand-edited or corrupt record: said once, never estimated from
        warn(exc, "not used for the time estimate")
        record = None
    except (RecordError, OSError, ValueError):
        record = None
    if not record or not record.get("duration_s"):
        return None
    ran = fields(record.get("environment")).get("torch")
    if torch is not None and not (ran and same_release(str(ran), torch)):
        return None
    waited = number(fields(fields(record.get("timing")).get("turns")).get("waited_s"))   # in turns: its partner's time
    return max(number(record["duration_s"]) - waited, 0.0) + (settings_delta_s(record, settings) if settings else 0.0)


def fields(value: object) -> Mapping[str, object]:
    """A JSON object's fields; none for anything else (null, absent)."""
    return value if isinstance(value, dict) else {}


def number(value: object) -> float:
    """A JSON number as a float; 0.0 for anything else (null, absent)."""
    return float(value) if isinstance(value, (int, float)) else 0.0


def settings_delta_s(record: Mapping[str, object], settings: Mapping[str, object]) -> float:
    """Seconds a process like ``record``'s takes more (or less) under ``settings`` than it took: issue 32's
    paired blocks (about one more eager loop and its warm-up per compiled process; a record that has them
    under --no-paired costs their duration less) and the timed loop's minimum duration (``min_time_s``;
    "auto": energy.ENERGY_MIN_S where the record's loop had an energy counter); and issue 34's ``turns``: the blocks
    in turns are as many calls as the timed loop, about one more loop (a record that has them, in a run without
    turns, costs their calls less). A pair's waits are not counted: its two processes take turns, so their wall
    time is about the sum of their own, as one after the other. Every pending repeat is billed as in turns, though
    an image outside any image comparison, or a repeat only one side needs, runs alone."""
    timing = fields(record.get("timing"))
    if not timing:
        return 0.0
    delta = 0.0
    loop_s = number(fields(timing.get("extended")).get("loop_s")) or number(timing.get("loop_wall_ms")) / 1000.0
    compiled = fields(record.get("cell")).get("mode") not in (None, "eager")
    paired = timing.get("paired")
    if compiled and settings.get("paired", True) and not paired:
        delta += 2.0 * loop_s + number(timing.get("warmup_s"))
    elif paired and not settings.get("paired", True):
        delta -= number(fields(paired).get("duration_s"))
    wanted = settings.get("min_time_s", "auto")
    if wanted == "auto":
        wanted = ENERGY_MIN_S if fields(timing.get("energy")).get("source") else 0.0
    delta += max(0.0, number(wanted) - loop_s)
    turns = timing.get("turns")
    if settings.get("turns") and not turns:
        delta += loop_s
    elif turns and not settings.get("turns"):
        done = fields(turns)
        blocks = done.get("block_ms")
        delta -= sum(number(ms) for ms in (blocks if isinstance(blocks, list) else [])) * \
            number(done.get("block_calls")) / 1000.0
    return delta


def previous_image_dirs(out_dir: Path) -> List[Path]:
    """The same image's folder in the other runs beside this one (``<results>/<run>/<image>``),
    newest first (by the folder's last change: a record written)."""
    run_path = Path(out_dir).parent
    try:
        others = [path / Path(out_dir).name for path in run_path.parent.iterdir() if path != run_path]
    except OSError:
        return []
    found = [path for path in others if path.is_dir()]
    return sorted(found, key=lambda path: (path.stat().st_mtime_ns, str(path)), reverse=True)


Timed = Tuple[float, float, str, Optional[int]]   # a record's start, duration, mode and slot (Estimates)


class Estimates:
    """Seconds a pending repeat is expected to take, for ordering units and the bill: the duration of its
    earlier record in this run (a forced or failed rerun), else of this run's nearest earlier repeat of the
    same cell (a repeat added to a run: its compile is warm as theirs was), else of the newest earlier run's record
    of the same cell in the same image (matched by file name: cell id and repeat, else the cell's
    repeat 0; and by torch release when the image pins one, ``torch_of[image]``), else this machine's
    pace: the mean duration of the records of the same mode already in this image's folder (other
    models, measured here; issue 30: the model below billed an H100 run 2.2x too high), else
    ``MODEL_S`` by mode.

    ``runner_start_s``: what starting a runner costs here, beside its processes' durations (the
    interpreter, imports, the cache), from the gaps between one runner's last record and the next
    runner's first in this run's folders; None where the records show none."""

    def __init__(self, torch_of: Optional[Mapping[str, Optional[str]]] = None,
                 settings: Optional[Mapping[str, object]] = None) -> None:
        self._torch_of = dict(torch_of or {})
        self._settings = dict(settings) if settings else None   # the run's: paired, min_time_s (the bill)
        self._previous: Dict[Path, List[Path]] = {}
        self._here: Dict[Path, List[Timed]] = {}

    def __call__(self, work: ImageWork, repeat: Repeat) -> float:
        out_dir = Path(work.out_dir)
        duration = record_duration(out_dir / f"{repeat.id}.json", settings=self._settings)
        for index in range(repeat.index - 1, -1, -1):
            if duration is not None:
                break
            duration = record_duration(out_dir / f"{Repeat(repeat.cell, index).id}.json", settings=self._settings)
        if duration is None:
            duration = self.previous_duration(work, repeat)
        if duration is None:
            duration = self.pace_here(work, repeat.cell.mode)
        if duration is not None:
            return duration
        paired = self._settings is not None and bool(self._settings.get("paired", True))
        return generic_s(repeat.cell.mode, repeat.cell.size, paired)

    def _records_here(self, out_dir: Path) -> List[Timed]:
        """(started at, duration, mode, slot) of every readable record in ``out_dir``, by start (slot: the
        record's ``placement.slot``, None for a run without slots)."""
        if out_dir not in self._here:
            found: List[Timed] = []
            for path in sorted(out_dir.glob("*.json")) if out_dir.is_dir() else ():
                if path.name in NOT_RECORDS:   # cells.json: no process, and no warning
                    continue
                try:
                    record = read_record(path)
                except Unvouched as exc:   # a NaN, negative or text duration: never this machine's pace
                    warn(exc, "not used for the time estimate")
                    continue
                except (RecordError, OSError, ValueError):
                    continue
                start, duration = _started_s(record.get("started_at")), number(record.get("duration_s"))
                mode = fields(record.get("cell")).get("mode")
                slot = fields(record.get("placement")).get("slot")
                if duration and mode:
                    found.append((start if start is not None else float("nan"), duration, str(mode),
                                  slot if isinstance(slot, int) and not isinstance(slot, bool) else None))
            self._here[out_dir] = sorted(found, key=lambda item: item[0])
        return self._here[out_dir]

    def pace_here(self, work: ImageWork, mode: str) -> Optional[float]:
        """The mean duration of this image folder's records of ``mode`` (measured on this machine)."""
        here = self._records_here(Path(work.out_dir))
        durations = [duration for _, duration, recorded, _ in here if recorded == mode]
        return statistics.fmean(durations) if durations else None

    def runner_start_s(self, works: Sequence[ImageWork]) -> Optional[float]:
        """The median gap (RUNNER_GAP_S to RUNNER_GAP_MAX_S) between the end of every record so far and the next
        record's start, over ``works``' folders together, slot by slot (``_runner_gaps``): a runner starting;
        where they show none (a new run), in the same images' folders of the newest earlier run beside it
        (``previous_image_dirs``); None where neither does."""
        gaps = self._runner_gaps(dict.fromkeys(Path(work.out_dir) for work in works))
        if not gaps:
            earlier = (self._previous_dirs(Path(work.out_dir)) for work in works)
            gaps = self._runner_gaps(dict.fromkeys(dirs[0] for dirs in earlier if dirs))
        return statistics.median(gaps) if gaps else None

    def start_s(self, works: Sequence[ImageWork]) -> Tuple[float, bool]:
        """What a runner's start costs: (``runner_start_s``, True) where records show one, else (the generic start
        of ``works``' cells, ``generic_start_s``, False)."""
        measured = self.runner_start_s(works)
        if measured is not None:
            return measured, True
        return generic_start_s(repeat.cell.size for work in works for repeat in work.pending), False

    def _runner_gaps(self, folders: Iterable[Path]) -> List[float]:
        """The gaps of ``folders``' records on one timeline per slot: one image's folder alone would count the
        other images' runners (run in between) as its runner's start, and a pair in turns overlaps."""
        by_slot: Dict[Optional[int], List[Tuple[float, float]]] = {}
        for out_dir in folders:
            for start, duration, _, slot in self._records_here(out_dir):
                if start == start:
                    by_slot.setdefault(slot, []).append((start, duration))
        gaps = []
        for timed in by_slot.values():
            timed.sort()
            ended = timed[0][0] + timed[0][1]
            for start, duration in timed[1:]:
                gaps.append(start - ended)
                ended = max(ended, start + duration)
        return [gap for gap in gaps if RUNNER_GAP_S <= gap <= RUNNER_GAP_MAX_S]

    def _previous_dirs(self, out_dir: Path) -> List[Path]:
        if out_dir not in self._previous:
            self._previous[out_dir] = previous_image_dirs(out_dir)
        return self._previous[out_dir]

    def previous_duration(self, work: ImageWork, repeat: Repeat) -> Optional[float]:
        torch = self._torch_of.get(work.image_name)
        for folder in self._previous_dirs(Path(work.out_dir)):
            for stem in dict.fromkeys((repeat.id, repeat.cell.id)):
                duration = record_duration(folder / f"{stem}.json", torch, self._settings)
                if duration is not None:
                    return duration
        return None


# A gap between two records of a folder longer than this is a runner starting (started_at has whole
# seconds: within one runner the next record starts within a second of the last one's end); longer
# than the maximum, another invocation.
RUNNER_GAP_S = 2.0
RUNNER_GAP_MAX_S = 300.0


def _started_s(value: object) -> Optional[float]:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(value)).timestamp() if value else None
    except ValueError:
        return None


def takes_units(executor: Optional[str], slots: Union[str, int], gpus: bool) -> bool:
    """Whether a run takes its work as units (``make_units``: model by model, longest first; the slots and
    ray executors) or image by image, round by round (the sequential executor): as
    ``matrixbench.executors.create_executor`` chooses (no --executor: slots where the run has them,
    ``slots`` auto giving them only to a GPU run)."""
    if executor in ("sequential", "slots", "ray"):
        return executor != "sequential"
    return slots != "auto" or gpus


RAY_NOT_ASKED = ("not asked: this dry run did not connect to the Ray cluster; the run asks it, as does a dry run "
                 "with --device cuda")


def runners_at_once(executor: Optional[str], slots: Union[str, int], gpus: bool, gpu_count: int = 1) -> AtOnce:
    """How many runners the run's executor runs at once, for the bill: one (the sequential executor, and slots
    auto on a CPU run), a slot's count (``slots`` N), one per GPU (slots auto on a GPU run: ``gpu_count``, the
    GPUs it places); a Ray cluster's is the cluster's (``RayBackend.runners_at_once`` asks it), one where it was
    not asked (``RAY_NOT_ASKED``)."""
    if executor == "ray":
        return AtOnce({None: 1}, RAY_NOT_ASKED)
    if not takes_units(executor, slots, gpus):
        return AtOnce.here(1)
    if slots == "auto":
        return AtOnce.here(max(1, gpu_count) if gpus else 1)   # auto on a CPU run is one slot of every core
    return AtOnce.here(int(slots))


def run_order(works: Sequence[ImageWork], units: bool,
              torch_of: Optional[Mapping[str, Optional[str]]] = None) -> List[Part[ImageWork]]:
    """The runners of ``works``' pending repeats in the order the run starts them, as
    ``[(image work, repeats), ...]``: by units (``make_units``, then each unit's ``rounds``; with several
    slots, the order they are taken from the queue) or, one runner at a time, ``rounds`` across the images.
    The executors run this order and ``run --dry-run`` prints it."""
    if units:
        return [part for unit in make_units(works, torch_of) for part in unit.rounds()]
    return rounds([(work, work.pending) for work in works if work.pending])


def make_units(works: Sequence[ImageWork],
               torch_of: Optional[Mapping[str, Optional[str]]] = None) -> List[Unit[ImageWork]]:
    """The pending repeats of ``works`` (ImageWork, one per image, in matrix order) as one unit
    per model and batch size, longest first (ties by model, then batch size); ``torch_of``: the
    torch version each image pins (image name -> "2.0.1"), to match earlier runs' records."""
    estimate = Estimates(torch_of)
    by_key: Dict[UnitKey, Dict[int, Part[ImageWork]]] = {}
    for work in works:
        for repeat in work.pending:
            parts = by_key.setdefault(unit_key(repeat), {})
            parts.setdefault(id(work), (work, []))[1].append(repeat)
    units = [Unit(model, batch_size, list(parts.values()),
                  sum(estimate(work, repeat) for work, repeats in parts.values() for repeat in repeats))
             for (model, batch_size), parts in by_key.items()]
    return sorted(units, key=lambda unit: (-unit.estimate_s, unit.key))


def run_on_slots(slots: Sequence[Slot], units: Sequence[Unit[W]], run_unit: RunUnit[W],
                 stop_all: Callable[[], None]) -> None:
    """Run ``units`` on ``slots``: ``run_unit(slot, unit, busy_units)`` in one thread per slot, each taking
    the next unit it may run (a pinned unit waits for its slot) until none is left for it.

    The first error stops new units from starting (running ones finish) and is raised once every
    thread is done; Ctrl-C also calls ``stop_all()`` to stop the runners already started.
    """
    queue, lock, busy = deque(units), threading.Lock(), [0]

    def take_units(slot: Slot, stopping: threading.Event) -> None:
        while True:
            with lock:
                unit = None if stopping.is_set() else _take(queue, slot.index)
                if unit is None:
                    return
                busy[0] += 1
                now_busy = busy[0]
            try:
                run_unit(slot, unit, now_busy)
            finally:
                with lock:
                    busy[0] -= 1

    run_threads([functools.partial(take_units, slot) for slot in slots], stop_all,
                [f"slot-{slot.index}" for slot in slots])


def _take(queue: Deque[Unit[W]], slot_index: int) -> Optional[Unit[W]]:
    """The first unit of ``queue`` the slot ``slot_index`` may run (unpinned, or pinned to it: ``Unit.slot``),
    taken off it; None when none is left for it."""
    for position, unit in enumerate(queue):
        if getattr(unit, "slot", None) in (None, slot_index):
            del queue[position]
            return unit
    return None


class Serialized:
    """A progress display called from several slot threads: one call at a time."""

    def __init__(self, inner: Progress) -> None:
        self._inner, self._lock = inner, threading.RLock()

    def start(self, total: int, skipped: int) -> None:
        with self._lock:
            self._inner.start(total, skipped)

    def image_started(self, image_name: str, pending: int, skipped: int) -> None:
        with self._lock:
            self._inner.image_started(image_name, pending, skipped)

    def more(self, count: int) -> None:
        with self._lock:
            self._inner.more(count)

    def cell_finished(self, image_name: str, cell: object, record: object) -> None:
        with self._lock:
            self._inner.cell_finished(image_name, cell, record)

    def slot_running(self, slot: int, image_name: Optional[str] = None, cell: object = None) -> None:
        with self._lock:
            self._inner.slot_running(slot, image_name, cell)

    def tick(self) -> None:
        with self._lock:
            self._inner.tick()

    def note(self, text: str) -> None:
        with self._lock:
            self._inner.note(text)

    def close(self) -> None:
        with self._lock:
            self._inner.close()
