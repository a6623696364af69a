"""Progress of a run, per cell: k/N, image, model, mode, batch size, elapsed, ETA, last status.

The host learns that a cell finished only from its record file: ``RecordWatcher`` polls the
image's output folder while the backend runs (runner stdout is never parsed).
``ProgressState`` holds the counts and the ETA; ``TqdmProgress`` shows them; ``NullProgress``
is the silent default for library callers.
"""
import sys
import threading
import time
from collections import Counter

from runner.core import Repeat, Status
from runner.schema import RecordError, load_record, record_path


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
    """"stable resnet default bs=4" (dtype added when not float32)."""
    dtype = "" if cell.dtype == "float32" else f" {cell.dtype}"
    return f"{image_name} {cell.model} {cell.mode} bs={cell.batch_size}{dtype}"


def record_summary(record):
    """"ok 12.34 ms (compile 21.0 s) on cpu[, noisy (cv 0.31)]" or "error: RuntimeError: ..."."""
    if record.status is not Status.OK:
        error = record.error
        message = f"{error.type}: {error.message}".strip(": ") if error else ""
        return f"{record.status.value}: {message[:160]}" if message else record.status.value
    timing = record.timing or {}
    text = f"ok {timing.get('mean_ms', float('nan')):.2f} ms"
    if timing.get("first_call_s") is not None and record.cell.mode != "eager":
        text += f" (compile {timing['first_call_s']:.1f} s)"
    text += f" on {record.device}"
    return text + (f", noisy (cv {timing['cv']:.2f})" if timing.get("noisy") else "")


class ProgressState:
    """Counts and timing of the cells a run executes (cells skipped by resume are not counted)."""

    def __init__(self, total, clock=time.monotonic):
        self.total = total
        self.done = 0
        self.statuses = Counter()
        self.last = None  # "stable resnet eager bs=1: ok 12.3 ms on cpu"
        self._clock = clock
        self._started = clock()

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
        """The status line: counts, elapsed, ETA and the last finished cell."""
        last = f" | last: {self.last}" if self.last else ""
        return (f"{self.counter()} cells | elapsed {format_duration(self.elapsed_s())}"
                f" | eta {format_duration(self.eta_s())}{last}")


class NullProgress:
    """Progress that shows nothing but still keeps the state (the library's default)."""

    def __init__(self):
        self.state = ProgressState(0)

    def start(self, total, skipped):
        self.state = ProgressState(total)

    def image_started(self, image_name, pending, skipped):
        pass

    def cell_finished(self, image_name, cell, record):
        self.state.cell_finished(image_name, cell, record)

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

    def __init__(self, stream=None):
        super().__init__()
        self._stream = stream or sys.stderr

    def cell_finished(self, image_name, cell, record):
        super().cell_finished(image_name, cell, record)
        state = self.state
        self.note(f"[{state.counter()}] {cell_label(image_name, cell)}: {cell_result(record)} | "
                  f"elapsed {format_duration(state.elapsed_s())} eta {format_duration(state.eta_s())}")

    def note(self, text):
        print(text, file=self._stream, flush=True)


def cell_result(record):
    """"ok 12.34 ms, first call 21.0 s" or "error: RuntimeError: ..." (one line)."""
    if record.status is not Status.OK:
        return record_summary(record).splitlines()[0]
    timing = record.timing or {}
    first = timing.get("first_call_s")
    first_call = f", first call {first:.1f} s" if first is not None else ""
    return f"ok {timing.get('mean_ms', float('nan')):.2f} ms{first_call}"


class TqdmProgress(NullProgress):
    """A tqdm bar on stderr plus one log line per finished cell."""

    def __init__(self, stream=None):
        super().__init__()
        self._stream = stream or sys.stderr
        self._bar = None

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

    def cell_finished(self, image_name, cell, record):
        super().cell_finished(image_name, cell, record)
        self.note(f"[{self.state.counter()}] {self.state.last}")
        self._refresh()
        if self._bar is not None:
            self._bar.update(1)

    def tick(self):
        self._refresh()

    def note(self, text):
        from tqdm import tqdm

        tqdm.write(text, file=self._stream)

    def close(self):
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


def _stamp(path):
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


def _record_path(out_dir, item):
    return record_path(out_dir, item.cell, item.index) if isinstance(item, Repeat) else record_path(out_dir, item)


class RecordWatcher:
    """Polls ``out_dir`` for new records of ``cells`` (Cells, or Repeats for one repeat of a cell
    each) and calls ``on_record(cell, record)`` once each.

    A record counts as new when its file appears or changes after the watcher started (so
    ``--force`` reruns are seen too). Use as a context manager around the backend's run; on
    exit it stops the thread and polls one last time.
    """

    def __init__(self, out_dir, cells, on_record, on_tick=None, interval=0.5):
        self._waiting = {_record_path(out_dir, item): item for item in cells}
        self._before = {path: _stamp(path) for path in self._waiting}
        self._on_record = on_record
        self._on_tick = on_tick or (lambda: None)
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="record-watcher", daemon=True)
        self._failure = None

    def poll(self):
        """Report every record that appeared since the last poll; return how many."""
        found = [path for path in self._waiting if _stamp(path) != self._before[path]]
        reported = 0
        for path in found:
            try:
                record = load_record(path)
            except RecordError:
                continue  # unreadable for now: look again at the next poll
            item = self._waiting.pop(path)
            self._on_record(item.cell if isinstance(item, Repeat) else item, record)
            reported += 1
        return reported

    @property
    def waiting(self):
        """Cells whose record has not appeared yet."""
        return list(self._waiting.values())

    def _loop(self):
        try:
            while not self._stop.wait(self._interval):
                self.poll()
                self._on_tick()
        except Exception as exc:  # surfaced in __exit__, on the caller's thread
            self._failure = exc

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        self._stop.set()
        self._thread.join()
        if self._failure is None:
            self.poll()
        if self._failure is not None and exc_type is None:
            raise self._failure
        return False
