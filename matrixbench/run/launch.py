"""One launch: one request -> one runner -> its records watched -> one Outcome.

Every caller that starts a runner goes through ``launch``: the sequential and slot executors, the
calibration phases, a Ray task on its node, and ``validate --build``'s model check. An environment
(``matrixbench.environments``) only starts the runner and returns its exit code; what that ending
means is judged here, in ``judge``, and nowhere else.

The policy for a runner that dies (a crash, an OOM kill, a container that exits early): the run
carries on. The Outcome says ``incomplete`` with the repeats left without a record, the runner's exit
code and the last lines of its log (secrets redacted); the executor counts them and goes on with the
next unit, and the run ends ``incomplete`` (run.json) with a RunError that names every image's missing
cells (``run.RunSummary.describe``). Chosen over stopping at the first death (what the docker
backend did) because one runner's death says nothing about the others': a torch version that
segfaults on one model must not cost the measurements of every other image, and a rerun resumes the
missing cells only. Errors of our own (an image never built, a venv of the wrong torch) are not a
runner dying: they raise before any runner starts.
"""
import enum
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Callable, List, Literal, Optional, Sequence, Tuple, Type, Union

from matrixbench.environments.base import RunRequest, Starter
from matrixbench.redact import redact_text, secrets
from matrixbench.run.layout import LOG_FILENAME
from runner.core import Cell, Record, Repeat
from runner.noise_probe import PROBE_FILENAME
from runner.schema import CHECK_FILENAME, RecordError, load_record, record_path

LOG_TAIL_LINES = 40
OnRecord = Callable[[Cell, Record], None]


class LaunchStatus(str, enum.Enum):
    COMPLETE = "complete"        # every repeat asked for has its record (a check: its answer)
    INCOMPLETE = "incomplete"    # the runner ended without some of them


@dataclass(frozen=True)
class Outcome:
    """How one runner ended: the judgement, its exit code, the repeats it left without a record,
    and the last lines of its log (redacted) when it left some."""

    status: LaunchStatus
    exit_code: int
    missing: Tuple[Repeat, ...] = ()
    log_tail: str = ""

    @property
    def complete(self) -> bool:
        return self.status is LaunchStatus.COMPLETE

    def describe(self, request: RunRequest) -> str:
        """What an incomplete runner left, on one line: "image 'x': the runner exited with code 139 before
        every cell had a record (1 of 2 do; ...); its last log line: ...; its log: PATH". A traceback in the
        log stays there: the console gets its last line (the exception) and the log's path."""
        total = len(request.repeats())
        last = last_line(self.log_tail)
        said = f"; its last log line: {last}" if last else ""
        shown = ", ".join(repeat.id for repeat in self.missing[:MAX_NAMED])
        more = f" and {len(self.missing) - MAX_NAMED} more" if len(self.missing) > MAX_NAMED else ""
        without = f"; without a record: {shown}{more}" if shown else ""
        return (f"image {request.image.name!r}: the runner exited with code {self.exit_code} before every cell "
                f"had a record ({total - len(self.missing)} of {total} do{without}; finished records are kept, "
                f"rerun to resume){said}; its log: {Path(request.work_dir()) / LOG_FILENAME}")


MAX_LINE_CHARS = 300
MAX_NAMED = 5   # cells named in an incomplete runner's line; the rest counted


def last_line(text: str) -> str:
    """The last non-empty line of a log (a traceback's: the exception), at most MAX_LINE_CHARS long."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1]
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + "..."


def launch(environment: Starter, request: RunRequest, on_record: Optional[OnRecord] = None,
           on_tick: Optional[Callable[[], None]] = None) -> Outcome:
    """Run ``request`` in ``environment`` (blocking), ``on_record(cell, record)`` called as each record
    appears; the Outcome, judged by ``judge``. KeyboardInterrupt passes through after the
    environment stopped its runner (finished records stay)."""
    Path(request.paths.out_dir).mkdir(parents=True, exist_ok=True)
    repeats = request.repeats() if request.work.runs_cells else []
    with RecordWatcher(request.paths.out_dir, repeats, on_record or (lambda cell, record: None), on_tick=on_tick):
        exit_code = environment.run(request)
    return judge(request, exit_code)


def judge(request: RunRequest, exit_code: int) -> Outcome:
    """The one judgement of a runner's end: complete when every repeat has its record (a check: when it
    exited 0 with its answer), whatever the exit code; else incomplete, with what is missing."""
    if not request.work.runs_cells:
        answer = CHECK_FILENAME if request.work.check else PROBE_FILENAME
        done = exit_code == 0 and (Path(request.paths.out_dir) / answer).is_file()
        missing: Tuple[Repeat, ...] = ()
    else:
        out_dir = request.paths.out_dir
        missing = tuple(r for r in request.repeats() if not record_path(out_dir, r.cell, r.index).exists())
        done = not missing
    if done:
        return Outcome(LaunchStatus.COMPLETE, exit_code)
    return Outcome(LaunchStatus.INCOMPLETE, exit_code, missing, log_tail(request))


def log_tail(request: RunRequest, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` of the runner's log, its secrets (the request's env) replaced by ***."""
    try:
        text = (Path(request.work_dir()) / LOG_FILENAME).read_text(errors="replace")
    except OSError:
        return ""
    return redact_text("\n".join(text.strip().splitlines()[-lines:]), secrets(request.env))


# --- watching for records ------------------------------------------------------------------------

def _stamp(path: Path) -> Optional[Tuple[int, int, int]]:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


def _record_path(out_dir: Union[str, Path], item: Union[Cell, Repeat]) -> Path:
    return record_path(out_dir, item.cell, item.index) if isinstance(item, Repeat) else record_path(out_dir, item)


class RecordWatcher:
    """Polls ``out_dir`` for new records of ``cells`` (Cells, or Repeats for one repeat of a cell
    each) and calls ``on_record(cell, record)`` once each.

    A record counts as new when its file appears or changes after the watcher started (so
    ``--force`` reruns are seen too). Use as a context manager around the backend's run; on
    exit it stops the thread and polls one last time.
    """

    def __init__(self, out_dir: Union[str, Path], cells: Sequence[Union[Cell, Repeat]], on_record: OnRecord,
                 on_tick: Optional[Callable[[], None]] = None, interval: float = 0.5) -> None:
        self._waiting = {_record_path(out_dir, item): item for item in cells}
        self._before = {path: _stamp(path) for path in self._waiting}
        self._on_record = on_record
        self._on_tick = on_tick or (lambda: None)
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="record-watcher", daemon=True)
        self._failure: Optional[Exception] = None

    def poll(self) -> int:
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
    def waiting(self) -> List[Union[Cell, Repeat]]:
        """Cells whose record has not appeared yet."""
        return list(self._waiting.values())

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self._interval):
                self.poll()
                self._on_tick()
        except Exception as exc:  # surfaced in __exit__, on the caller's thread
            self._failure = exc

    def __enter__(self) -> "RecordWatcher":
        self._thread.start()
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> Literal[False]:
        self._stop.set()
        self._thread.join()
        if self._failure is None:
            self.poll()
        if self._failure is not None and exc_type is None:
            raise self._failure
        return False
