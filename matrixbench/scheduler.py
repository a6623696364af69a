"""Running a run's pending cells on several slots at once (issue 15).

A work unit is one model at one batch size: its pending repeats (every mode, dtype and repeat) in
every image, run image after image by one slot, so a torch-version comparison of a cell (the same
cell across images) never mixes two GPUs. Issue 15 proposed one model (all its batch sizes) per
unit; the default matrix has only 11 models, too few to keep 8 slots busy to the end
(benchmarks/results/sim_slots.md: 1.45-1.62x the ideal makespan at 8 slots with one-model units,
1.04-1.21x with model x batch-size units), and no comparison the report makes crosses batch sizes.

Units go longest first (the estimate: each cell's earlier record's duration where there is one,
else ``MODEL_S`` by mode); each slot is a thread that takes the next unit when its last one is done.
``make_units`` and ``Unit`` are the reusable part (a cluster task runs one Unit too).
"""
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Tuple

from runner.schema import RecordError, read_record

# Seconds a cell takes when no earlier record says: compiled modes compile, eager does not.
# A coarse model, used only to order the units; durations of earlier records take precedence.
MODEL_S = {"eager": 10.0, "default": 60.0, "reduce-overhead": 75.0, "max-autotune": 300.0}
JOIN_POLL_S = 0.2


UnitKey = Tuple[str, int]   # (model, batch size)


@dataclass
class Unit:
    """One model at one batch size: its pending repeats (runner.core.Repeat) per image, in matrix
    order, as ``[(image work, repeats), ...]``; ``estimate_s`` is their summed estimate."""

    model: str
    batch_size: int
    parts: List[Tuple[Any, list]]
    estimate_s: float

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


def unit_key(repeat) -> UnitKey:
    """The unit a repeat belongs to: its cell's model and batch size."""
    return (repeat.cell.model, repeat.cell.batch_size)


def cell_estimate_s(out_dir, repeat) -> float:
    """The duration in the repeat's earlier record (a forced or failed rerun), else the model's."""
    cell = repeat.cell
    path = out_dir / f"{repeat.id}.json"
    if path.exists():
        try:
            duration = read_record(path).get("duration_s")
        except (RecordError, OSError, ValueError):
            duration = None
        if duration:
            return float(duration)
    return MODEL_S.get(cell.mode, max(MODEL_S.values()))


def make_units(plans) -> List[Unit]:
    """The pending repeats of ``plans`` (ImageWork, one per image, in matrix order) as one unit
    per model and batch size, longest first (ties by model, then batch size)."""
    by_key: Dict[UnitKey, Dict[int, Tuple[Any, list]]] = {}
    for plan in plans:
        for repeat in plan.pending:
            parts = by_key.setdefault(unit_key(repeat), {})
            parts.setdefault(id(plan), (plan, []))[1].append(repeat)
    units = [Unit(model, batch_size, list(parts.values()),
                  sum(cell_estimate_s(plan.out_dir, repeat) for plan, repeats in parts.values() for repeat in repeats))
             for (model, batch_size), parts in by_key.items()]
    return sorted(units, key=lambda unit: (-unit.estimate_s, unit.key))


def run_on_slots(slots: Sequence, units: Sequence[Unit], run_unit: Callable, stop_all: Callable) -> None:
    """Run ``units`` on ``slots``: ``run_unit(slot, unit, busy_slots)`` in one thread per slot.

    The first error stops new units from starting (running ones finish) and is raised once every
    thread is done; Ctrl-C also calls ``stop_all()`` to stop the runners already started.
    """
    errors: List[BaseException] = []
    queue, lock, busy = deque(units), threading.Lock(), [0]

    def work(slot):
        while True:
            with lock:
                if errors or not queue:
                    return
                unit = queue.popleft()
                busy[0] += 1
                now_busy = busy[0]
            try:
                run_unit(slot, unit, now_busy)
            except BaseException as exc:  # noqa: B036 -- handed to the main thread, raised there
                with lock:
                    errors.append(exc)
                return
            finally:
                with lock:
                    busy[0] -= 1

    threads = [threading.Thread(target=work, args=(slot,), name=f"slot-{slot.index}", daemon=True)
               for slot in slots]
    for thread in threads:
        thread.start()
    try:
        _join(threads)
    except KeyboardInterrupt:
        with lock:
            errors.insert(0, KeyboardInterrupt())
        stop_all()
        for thread in threads:
            thread.join()
        raise
    if errors:
        raise errors[0]


def _join(threads):
    """Wait for ``threads`` in short joins, so Ctrl-C reaches the main thread meanwhile."""
    for thread in threads:
        while thread.is_alive():
            thread.join(JOIN_POLL_S)


class Serialized:
    """A progress display called from several slot threads: one call at a time."""

    def __init__(self, inner):
        self._inner, self._lock = inner, threading.RLock()

    def __getattr__(self, name):
        attribute = getattr(self._inner, name)
        if not callable(attribute):
            return attribute

        def call(*args, **kwargs):
            with self._lock:
                return attribute(*args, **kwargs)
        return call
