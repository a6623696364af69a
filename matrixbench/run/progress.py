"""Progress of a run, per cell: k/N, image, model, mode, batch size, elapsed, ETA, last status.

The host learns that a cell finished only from its record file: ``RecordWatcher`` polls the
image's output folder while the backend runs (runner stdout is never parsed).
``ProgressState`` holds the counts and the ETA; ``TqdmProgress`` shows them; ``NullProgress``
is the silent default for library callers.

With slots (matrixbench.executors.scheduler) it is one display for the whole run: cells done / total over
every slot, each slot's current cell (the first repeat of its runner whose record has not
appeared: runners go in order) and for how long, and an ETA over all slots (the run's
throughput so far, cells finished by any slot per second, applied to the cells left). On a
terminal each slot gets a status line of its own under the bar; a log gets "slot i" on each
finished cell's line.
"""
import sys
import time
from collections import Counter
from typing import Optional, Protocol

from runner import axes
from runner.core import Mode, Status


def format_duration(seconds):
    """12 -> "12s", 185 -> "3m05s", 3720 -> "1h02m"; None -> "--"."""
    if seconds is None:
        return "--"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def eta_seconds(elapsed, done, total):
    """Remaining time if the cells left take as long as the finished ones did; None before the first."""
    if done <= 0:
        return None
    return elapsed / done * max(total - done, 0)


def cell_label(image_name, cell):
    """"stable resnet default bs=4", plus the row axes' words past the model and size (runner.axes:
    the dtype when not float32, ...)."""
    extras = "".join(f" {word}" for axis, word in axes.words(cell, (axes.ROW,)) if axis.name not in ("model", "size"))
    return f"{image_name} {cell.model} {cell.mode} bs={cell.batch_size}{extras}"


def record_summary(record):
    """"ok 12.34 ms (compile 21.0 s) on cpu[, noisy (cv 0.31)]" or "error: RuntimeError: ..."."""
    if record.status is not Status.OK:
        error = record.error
        message = f"{error.type}: {error.message}".strip(": ") if error else ""
        return f"{record.status.value}: {message[:160]}" if message else record.status.value
    timing = record.timing or {}
    text = f"ok {timing.get('mean_ms', float('nan')):.2f} ms"
    if timing.get("first_call_s") is not None and Mode(record.cell.mode).compiled:
        text += f" (compile {timing['first_call_s']:.1f} s)"
    text += f" on {record.device}"
    return text + (f", noisy (cv {timing['cv']:.2f})" if timing.get("noisy") else "")


class ProgressState:
    """Counts and timing of the cells a run executes (cells skipped by resume are not counted),
    and with slots what each slot runs now."""

    def __init__(self, total, clock=time.monotonic):
        self.total = total
        self.done = 0
        self.statuses = Counter()
        self.last = None  # "stable resnet eager bs=1: ok 12.3 ms on cpu"
        self.running = {}  # slot index -> (cell label, since) or None when idle
        self._clock = clock
        self._started = clock()

    def slot_running(self, slot, label):
        """Slot ``slot`` now runs the cell ``label`` (None: it is idle)."""
        current = self.running.get(slot)
        if label is None:
            self.running[slot] = None
        elif current is None or current[0] != label:
            self.running[slot] = (label, self._clock())

    def slot_line(self, slot):
        """"slot 1: stable vit default bs=1 (1m05s)" or "slot 1: idle"."""
        current = self.running.get(slot)
        if current is None:
            return f"slot {slot}: idle"
        return f"slot {slot}: {current[0]} ({format_duration(self._clock() - current[1])})"

    def slots_text(self):
        return "; ".join(self.slot_line(slot) for slot in sorted(self.running))

    def cell_finished(self, image_name, cell, record):
        self.done += 1
        self.statuses[record.status.value] += 1
        self.last = f"{cell_label(image_name, cell)}: {record_summary(record)}"

    def elapsed_s(self):
        return self._clock() - self._started

    def eta_s(self):
        return eta_seconds(self.elapsed_s(), self.done, self.total)

    def counter(self):
        return f"{self.done}/{self.total}"

    def describe(self):
        """The status line: counts, elapsed, ETA, the last finished cell, and each slot's cell."""
        last = f" | last: {self.last}" if self.last else ""
        slots = f" | {self.slots_text()}" if self.running else ""
        return (f"{self.counter()} cells | elapsed {format_duration(self.elapsed_s())}"
                f" | eta {format_duration(self.eta_s())}{last}{slots}")


class Progress(Protocol):
    """What the run path asks of a progress display (NullProgress, LineProgress, TqdmProgress)."""

    def start(self, total: int, skipped: int) -> None: ...

    def image_started(self, image_name: str, pending: int, skipped: int) -> None: ...

    def more(self, count: int) -> None: ...

    def cell_finished(self, image_name: str, cell: object, record: object) -> None: ...

    def slot_running(self, slot: int, image_name: Optional[str] = None, cell: object = None) -> None: ...

    def tick(self) -> None: ...

    def note(self, text: str) -> None: ...

    def close(self) -> None: ...


class NullProgress:
    """Progress that shows nothing but still keeps the state (the library's default).
    ``clock`` (seconds, monotonic) is for tests."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self.state = ProgressState(0, clock)

    def start(self, total, skipped):
        self.state = ProgressState(total, self._clock)

    def image_started(self, image_name, pending, skipped):
        pass

    def more(self, count):
        """``count`` more cells to run than ``start`` said (``repeats: auto`` adds processes)."""
        self.state.total += count

    def cell_finished(self, image_name, cell, record):
        self.state.cell_finished(image_name, cell, record)

    def slot_running(self, slot, image_name=None, cell=None):
        """Slot ``slot`` now runs ``cell`` of ``image_name``; no cell: the slot is idle."""
        self.state.slot_running(slot, cell_label(image_name, cell) if cell is not None else None)

    def tick(self):
        pass

    def note(self, text):
        pass

    def close(self):
        pass


def make_progress(stream=None):
    """A tqdm bar where ``stream`` (default stderr) is a terminal; else one line per finished
    cell, so a log file (``make matrix > run.log``, nohup, tee, CI) holds no bar redraws."""
    stream = stream or sys.stderr
    is_terminal = getattr(stream, "isatty", lambda: False)()
    return TqdmProgress(stream) if is_terminal else LineProgress(stream)


class LineProgress(NullProgress):
    """For logs: one line per finished cell (k/N, cell, status, ms, first call, elapsed, ETA)
    and the run's few notes; nothing is redrawn."""

    def __init__(self, stream=None, clock=time.monotonic):
        super().__init__(clock)
        self._stream = stream or sys.stderr

    def cell_finished(self, image_name, cell, record):
        super().cell_finished(image_name, cell, record)
        state = self.state
        self.note(f"[{state.counter()}]{slot_prefix(record)} {cell_label(image_name, cell)}: "
                  f"{cell_result(record)} | elapsed {format_duration(state.elapsed_s())} "
                  f"eta {format_duration(state.eta_s())}")

    def note(self, text):
        print(text, file=self._stream, flush=True)


def slot_prefix(record):
    """" slot 1" for a record of a slot run, else ""."""
    placement = getattr(record, "placement", None)
    return f" slot {placement['slot']}" if placement and placement.get("slot") is not None else ""


def cell_result(record):
    """"ok 12.34 ms, first call 21.0 s" or "error: RuntimeError: ..." (one line)."""
    if record.status is not Status.OK:
        return record_summary(record).splitlines()[0]
    timing = record.timing or {}
    first = timing.get("first_call_s")
    first_call = f", first call {first:.1f} s" if first is not None else ""
    return f"ok {timing.get('mean_ms', float('nan')):.2f} ms{first_call}"


class TqdmProgress(NullProgress):
    """A tqdm bar on stderr plus one log line per finished cell; with slots, one status line
    per slot under the bar (its current cell and for how long)."""

    def __init__(self, stream=None, clock=time.monotonic):
        super().__init__(clock)
        self._stream = stream or sys.stderr
        self._bar = None
        self._slot_lines = {}

    def start(self, total, skipped):
        from tqdm import tqdm

        super().start(total, skipped)
        if skipped:
            self.note(f"resume: {skipped} cell(s) already have a record and are skipped")
        self._bar = tqdm(total=total, file=self._stream, unit="cell", dynamic_ncols=True,
                         bar_format="{n_fmt}/{total_fmt} |{bar:20}| {desc}")
        self._refresh()

    def image_started(self, image_name, pending, skipped):
        self.note(f"image {image_name}: {pending} cell(s) to run, {skipped} already done")

    def more(self, count):
        super().more(count)
        if self._bar is not None:
            self._bar.total = self.state.total
            self._refresh()

    def cell_finished(self, image_name, cell, record):
        super().cell_finished(image_name, cell, record)
        self.note(f"[{self.state.counter()}]{slot_prefix(record)} {self.state.last}")
        self._refresh()
        if self._bar is not None:
            self._bar.update(1)

    def slot_running(self, slot, image_name=None, cell=None):
        super().slot_running(slot, image_name, cell)
        if slot not in self._slot_lines and self._bar is not None:
            from tqdm import tqdm

            self._slot_lines[slot] = tqdm(total=0, file=self._stream, position=len(self._slot_lines) + 1,
                                          bar_format="{desc}", leave=False, dynamic_ncols=True)
        self._refresh()

    def tick(self):
        self._refresh()

    def note(self, text):
        from tqdm import tqdm

        tqdm.write(text, file=self._stream)

    def close(self):
        for line in self._slot_lines.values():
            line.close()
        self._slot_lines = {}
        if self._bar is not None:
            self._refresh()
            self._bar.close()
            self._bar = None

    def _refresh(self):
        if self._bar is not None:
            state = self.state
            last = f" | last: {state.last}" if state.last else ""
            self._bar.set_description_str(
                f"elapsed {format_duration(state.elapsed_s())} eta {format_duration(state.eta_s())}{last}",
                refresh=True,
            )
        for slot, line in self._slot_lines.items():
            line.set_description_str(self.state.slot_line(slot), refresh=True)
