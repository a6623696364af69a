"""Running a run's pending cells on several slots at once (issue 15).

A work unit is one model: its pending cells in every image, run image after image by one slot,
so a torch-version comparison of a model never mixes two GPUs. Units go longest first (the
estimate: each cell's earlier record's duration where there is one, else ``MODEL_S`` by mode);
each slot is a thread that takes the next unit when its last one is done.
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


@dataclass
class Unit:
    """One model's pending repeats (runner.core.Repeat), per image in matrix order: [(plan, repeats), ...]."""

    model: str
    parts: List[Tuple[Any, list]]
    estimate_s: float

    @property
    def cells(self) -> int:
        return sum(len(cells) for _, cells in self.parts)


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
    """The pending cells of ``plans`` (one per image) as one unit per model, longest first."""
    by_model: Dict[str, Dict[int, Tuple[Any, list]]] = {}
    for plan in plans:
        for cell in plan.pending:
            parts = by_model.setdefault(cell.cell.model, {})
            parts.setdefault(id(plan), (plan, []))[1].append(cell)
    units = [Unit(model, list(parts.values()),
                  sum(cell_estimate_s(plan.out_dir, cell) for plan, cells in parts.values() for cell in cells))
             for model, parts in by_model.items()]
    return sorted(units, key=lambda unit: (-unit.estimate_s, unit.model))


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
