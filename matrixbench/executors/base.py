"""What every executor gets and fills: the ``Run`` (built once by ``run.run_matrix``), and the summary
it counts into.

An executor decides where and when the run's units go (``sequential``: one runner at a time;
``slots``: one runner per slot at once; ``ray``: one task per unit on a cluster); the ``Run`` knows
what each image's runner is asked (``request``) and launches it (``launch``: one Outcome, counted here).
The executors read the run's options through ``Options``, what ``run.command.RunOptions`` (a layer above)
has for them.
"""
import dataclasses
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Counter, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

from matrixbench.build.images import BuildOptions
from matrixbench.environments.base import Environment, ImageRef, Paths, Placement, RunRequest, Starter, Work
from matrixbench.environments.environment import runtime_secrets
from matrixbench.errors import RunError
from matrixbench.executors.adaptive import Outcome as RepeatsOutcome
from matrixbench.executors.ray.options import RayOptions
from matrixbench.executors.scheduler import Labelled, Serialized
from matrixbench.matrix import Matrix, runner_settings
from matrixbench.paths import compile_cache_root, hf_cache_home
from matrixbench.run.launch import Outcome, launch
from matrixbench.run.layout import LOG_FILENAME
from matrixbench.run.pending import ImageWork
from matrixbench.run.progress import Progress
from runner.core import Cell, Record, Repeat


class Options(Protocol):
    """What the executors read of a run's options: ``run.command.RunOptions`` is one (it sits a layer above)."""

    @property
    def run_name(self) -> str: ...

    @property
    def backend(self) -> str: ...

    @property
    def executor(self) -> Optional[str]: ...

    @property
    def device(self) -> str: ...

    @property
    def force(self) -> bool: ...

    @property
    def cold(self) -> bool: ...

    @property
    def cache_root(self) -> Optional[Path]: ...

    @property
    def hf_cache_dir(self) -> Optional[Path]: ...

    @property
    def gpu(self) -> Optional[str]: ...

    @property
    def allow_busy_gpus(self) -> bool: ...

    @property
    def ray(self) -> RayOptions: ...

    @property
    def build_options(self) -> Optional[BuildOptions]: ...

    @property
    def noise_check(self) -> bool: ...   # (read by run.command's noise check, from the Run)


@dataclass
class ImageResult:
    image_name: str
    out_dir: Path
    skipped: int
    recorded_failures: int = 0   # of the skipped cells
    ran: int = 0
    exit_code: Optional[int] = None
    statuses: Counter[str] = field(default_factory=Counter)
    missing: List[str] = field(default_factory=list)   # cell ids the runner left without a record


def last_log_line(out_dir: Path, tail_bytes: int = 4096) -> Optional[str]:
    """The runner's last words (the last line of ``<out_dir>/runner.log``, or of a slot's), e.g. why it
    refused its cells; None when there is no log."""
    logs = [log for log in [Path(out_dir) / LOG_FILENAME, *Path(out_dir).glob(f"slot-*/{LOG_FILENAME}")]
            if log.is_file()]
    for log in sorted(logs, key=lambda log: log.stat().st_mtime)[-1:]:
        try:
            with open(log, "rb") as handle:
                handle.seek(max(log.stat().st_size - tail_bytes, 0))
                lines = handle.read().decode(errors="replace").strip().splitlines()
        except OSError:
            return None
        return lines[-1][:300] if lines else None
    return None


@dataclass
class RunSummary:
    run_dir: Path
    images: List[ImageResult]
    repeats: Optional[RepeatsOutcome] = None   # what repeats auto / --budget left in doubt

    @property
    def missing(self) -> List[Tuple[str, str]]:
        return [(image.image_name, cid) for image in self.images for cid in image.missing]

    def statuses(self) -> Counter[str]:
        return sum((image.statuses for image in self.images), Counter())

    def failures(self) -> int:
        """Cells of the run whose record is a failure: those run now and those skipped."""
        ran = sum(n for status, n in self.statuses().items() if status != "ok")
        return ran + sum(image.recorded_failures for image in self.images)

    def cells(self) -> int:
        return sum(image.ran + image.skipped for image in self.images)

    @property
    def all_failed(self) -> bool:
        return self.cells() > 0 and self.failures() == self.cells()

    def describe(self) -> str:
        """Per image what ran and what was skipped; the last line says how many cells failed."""
        lines = [f"results in {self.run_dir}"]
        for image in self.images:
            counts = ", ".join(f"{n} {status}" for status, n in sorted(image.statuses.items())) or "nothing ran"
            failed = f", {image.recorded_failures} of them failures" if image.recorded_failures else ""
            lines.append(f"  {image.image_name}: {counts}; {image.skipped} skipped (already recorded{failed})")
            if image.missing:
                said = last_log_line(image.out_dir)
                lines.append(f"    {len(image.missing)} cell(s) without a record "
                             f"(runner exit code {image.exit_code}{': ' + said if said else ''}); "
                             f"see {image.out_dir}")
        if self.repeats is not None and self.repeats.describe():
            lines.append(self.repeats.describe())
        if self.failures():
            lines.append(f"{self.failures()} of {self.cells()} cells failed (their records say why); "
                         "--retry-failed reruns them")
        return "\n".join(lines)


@dataclass
class Run:
    """One run of a matrix, as its executor sees it: the matrix and options, the environment that
    starts each runner, the run folder, whether runners get GPUs, the pending work per image
    (``pending.ImageWork``), the progress display, and the counts (``summary``, ``results`` by label).
    What changes during the run changes through its methods: the works of each wave (``next_wave``), the
    progress made safe for threads (``serialize_progress``), the counts."""

    matrix: Matrix
    options: Options               # run.command.RunOptions
    environment: Environment
    path: Path
    gpus: bool
    environ: Mapping[str, str]
    works: Sequence[ImageWork]     # one per image (and GPU type)
    progress: Progress
    summary: RunSummary = field(init=False)
    results: Dict[str, ImageResult] = field(init=False)
    lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    waves: int = field(init=False, default=0)   # waves of repeats started (``next_wave``)

    def __post_init__(self) -> None:
        self.summary, self.results = RunSummary(self.path, []), {}
        for work in self.works:
            result = ImageResult(work.label, work.out_dir, skipped=work.done, recorded_failures=work.recorded_failures)
            self.results[work.label] = result
            self.summary.images.append(result)

    def next_wave(self, works: Sequence[ImageWork]) -> None:
        """The works of the run's next wave of repeats (``adaptive.Waves``); a wave after the first calibrates
        no more (the first did)."""
        if self.waves:
            self.matrix = dataclasses.replace(self.matrix, calibrate=False)
        self.waves += 1
        self.works = works

    def serialize_progress(self) -> None:
        """From here on the progress display is called from several threads (slots): one call at a time. Once:
        a later wave of repeats auto asks again."""
        if not isinstance(self.progress, Serialized):
            self.progress = Serialized(self.progress)

    def start(self) -> None:
        """The progress hears of each image (after calibration, before the matrix's units)."""
        for work in self.works:
            self.progress.image_started(work.label, len(work.pending), work.done)

    def request(self, work: ImageWork) -> RunRequest:
        """What ``work``'s image's runner is asked: its pending repeats, settings, caches, the run's GPUs
        and env; unplaced (an executor places it: ``RunRequest.placed``)."""
        image, options = self.matrix.images[work.image_name], self.options
        cells, schedule = work.schedule()
        return RunRequest(
            image=ImageRef(work.image_name, torch=image.torch, content_hash=image.content_hash(),
                           build_of=image.build_of),
            # auto on a host whose environment gives GPUs becomes cuda: the runner then fails with
            # the reason if torch cannot use them, instead of measuring on the CPU.
            work=Work(cells, runner_settings(self.matrix, "cuda" if self.gpus else options.device),
                      schedule=tuple((int(cell), int(repeat)) for cell, repeat in schedule),
                      order_seed=work.order_seed),
            paths=Paths(work.out_dir, cache_dir=None if options.cold else self.cache_root() / work.image_name,
                        hf_cache_dir=options.hf_cache_dir or hf_cache_home()),
            placement=Placement(gpus=self.gpus, gpu_ids=gpu_choice(options.gpu, self.environ) if self.gpus else ()),
            env={**image.env, **runtime_secrets(self.environ)},
        )

    def cache_root(self) -> Path:
        """Where the images' compile caches go (--cache-dir, else the default root)."""
        return Path(self.options.cache_root or compile_cache_root())

    def record_arrived(self, work: Labelled, cell: Cell, record: Record) -> None:
        """Count one record of ``work``'s image and show it."""
        result = self.results[work.label]
        with self.lock:
            result.ran += 1
            result.statuses[record.status.value] += 1
        self.progress.cell_finished(work.label, cell, record)

    def missed(self, work: Labelled, exit_code: Optional[int], missing: Sequence[str]) -> None:
        """Count the repeats (ids) a runner of ``work``'s image left without a record."""
        result = self.results[work.label]
        with self.lock:
            result.exit_code = exit_code if exit_code or result.exit_code is None else result.exit_code
            result.missing += list(missing)

    def launch(self, work: Labelled, request: RunRequest, slot: Optional[int] = None, counted: bool = True) -> Outcome:
        """One runner for ``request`` (some repeats of ``work``'s image; in slot ``slot``, if any), counted
        (unless not ``counted``: the calibration's cells are not the matrix's); the progress shows a slot's
        current cell: the first whose record has not appeared."""
        waiting: List[Repeat] = list(request.repeats())

        def show_slot(cell: Optional[Cell]) -> None:
            if slot is not None:
                self.progress.slot_running(slot, work.label, cell)

        def on_record(cell: Cell, record: Record) -> None:
            if counted:
                self.record_arrived(work, cell, record)
            waiting[:] = [r for r in waiting if (r.cell, r.index) != (cell, record.repeat)]
            show_slot(waiting[0].cell if waiting else None)

        show_slot(waiting[0].cell if waiting else None)
        outcome = launch(self.starter(), request, on_record, on_tick=self.progress.tick)
        if counted:
            self.missed(work, outcome.exit_code, [repeat.id for repeat in outcome.missing])
        if not outcome.complete:
            self.progress.note(outcome.describe(request))   # the run carries on (launch: one policy)
        return outcome

    def starter(self) -> Starter:
        """The run's environment as what starts a runner on this machine (a Backend: docker, venv, local): every
        executor but ray, whose nodes start the runners, launches through it (``launch``)."""
        if not isinstance(self.environment, Starter):
            raise RunError(f"the {self.environment.name} environment starts no runner on this machine "
                           "(its nodes do)")
        return self.environment


class Executor(ABC):
    """Where and when a run's units go."""

    @abstractmethod
    def run(self, run: Run) -> None:
        """Run every pending repeat of ``run.works``; count them in ``run``. Ctrl-C passes through after
        the runners stopped (their finished records stay)."""

    def describe(self) -> Optional[str]:
        """A line for the console, or None."""
        return None


def gpu_choice(gpu: Optional[str], environ: Mapping[str, str]) -> Tuple[str, ...]:
    """The GPUs asked for: --gpu, else the host's CUDA_VISIBLE_DEVICES; () means all."""
    text = gpu if gpu is not None else environ.get("CUDA_VISIBLE_DEVICES", "")
    return tuple(part.strip() for part in text.split(",") if part.strip())
