"""``matrixbench run``: run a matrix's pending cells, image by image (repeat by repeat), through a backend.

Records land in ``results/<run>/<image>/<cell_id>.json`` (the run name defaults to "default"),
next to ``cells.json`` (the runner's input for the cells run last); ``results/<run>/run.json``
is the run's manifest.
Cells that already have a record are skipped unless ``force``; failed ones rerun with
``retry_failed``. Progress comes from polling for record files while the backend runs.
Ctrl-C stops the backend (which removes what it started) and keeps every finished record.
"""
import dataclasses
import os
import shutil
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from matrixbench import run_folder
from matrixbench.backends import create_backend
from matrixbench.backends.base import RunRequest
from matrixbench.calibrate import run_calibration
from matrixbench.cluster import DEFAULT_NODE_BACKEND, RUNTIME_SECRETS, ClusterRun, UnitPart, UnitTask, shippable
from matrixbench.errors import RunError
from matrixbench.images import BuildOptions
from matrixbench.layout import run_dir, slot_dir
from matrixbench.manifest import finish_manifest, read_manifest, start_manifest
from matrixbench.matrix import runner_settings
from matrixbench.paths import cache_home
from matrixbench.pending import new_order_seed, pending_work, recorded_failures_line, unreadable_lines
from matrixbench.placement import AUTO, NoHostGpusError, check_gpus_free, plan_slots
from matrixbench.progress import NullProgress, RecordWatcher
from matrixbench.resume import check_resume
from matrixbench.scheduler import Serialized, make_units, rounds, run_on_slots
from runner.cells_file import schedule_pairs

DEFAULT_RUN = "default"


def default_cache_root():
    """Per-image compile caches live under ~/.cache/matrixbench/compile/<image>."""
    return cache_home() / "compile"


def default_hf_cache():
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")


@dataclass(frozen=True)
class RunOptions:
    run_name: str = DEFAULT_RUN
    results_root: Path = Path("results")
    backend: str = "docker"
    device: str = "auto"
    force: bool = False
    retry_failed: bool = False
    cold: bool = False
    cache_root: Optional[Path] = None     # None: default_cache_root()
    hf_cache_dir: Optional[Path] = None   # None: default_hf_cache()
    note: Optional[str] = None
    command: tuple = ()
    gpu: Optional[str] = None             # --gpu: indices or UUIDs, comma-separated; None: CUDA_VISIBLE_DEVICES
    allow_busy_gpus: bool = False         # slots: run even where another process uses a slot's GPU
    order_seed: Optional[int] = None      # the seed of the run order; None: a fresh one (recorded in run.json)
    ray_address: Optional[str] = None     # --backend ray: the cluster's HOST:PORT (None: a cluster on this node)
    node_backend: str = DEFAULT_NODE_BACKEND   # --backend ray: what runs the runner on each node (NODE_BACKENDS)
    registry: Optional[str] = None        # --backend ray, docker nodes: push images to HOST:PORT, nodes pull them
    build_options: Optional[BuildOptions] = None   # --backend ray, docker nodes: builds on the nodes


@dataclass
class ImageResult:
    image_name: str
    out_dir: Path
    skipped: int
    recorded_failures: int = 0   # of the skipped cells
    ran: int = 0
    exit_code: Optional[int] = None
    statuses: Counter = field(default_factory=Counter)
    missing: list = field(default_factory=list)   # cell ids the runner left without a record


@dataclass
class RunSummary:
    run_dir: Path
    images: list

    @property
    def missing(self):
        return [(image.image_name, cid) for image in self.images for cid in image.missing]

    def statuses(self):
        return sum((image.statuses for image in self.images), Counter())

    def failures(self):
        """Cells of the run whose record is a failure: those run now and those skipped."""
        ran = sum(n for status, n in self.statuses().items() if status != "ok")
        return ran + sum(image.recorded_failures for image in self.images)

    def cells(self):
        return sum(image.ran + image.skipped for image in self.images)

    @property
    def all_failed(self):
        return self.cells() > 0 and self.failures() == self.cells()

    def describe(self):
        """Per image what ran and what was skipped; the last line says how many cells failed."""
        lines = [f"results in {self.run_dir}"]
        for image in self.images:
            counts = ", ".join(f"{n} {status}" for status, n in sorted(image.statuses.items())) or "nothing ran"
            failed = f", {image.recorded_failures} of them failures" if image.recorded_failures else ""
            lines.append(f"  {image.image_name}: {counts}; {image.skipped} skipped (already recorded{failed})")
            if image.missing:
                lines.append(f"    {len(image.missing)} cell(s) without a record "
                             f"(runner exit code {image.exit_code}); see {image.out_dir}")
        if self.failures():
            lines.append(f"{self.failures()} of {self.cells()} cells failed (their records say why); "
                         "--retry-failed reruns them")
        return "\n".join(lines)


def run_matrix(matrix, options, progress=None, environ=None):
    """Run every pending cell of ``matrix``; return a RunSummary.

    The run folder is locked for the whole run (a second run on it is refused). Raises
    RunError when GPUs are asked for but unavailable, when cells end without a record, or when
    every cell of the run failed (the summary is in the message); KeyboardInterrupt passes
    through after the backend stopped and run.json says "interrupted" with the cells that ran.
    """
    progress = progress or NullProgress()
    environ = os.environ if environ is None else environ
    check_gpu_types(matrix, options.backend)
    check_backend_options(matrix, options)
    backend = create_backend(options.backend, **_backend_settings(options))
    try:
        if matrix.gpu_types:
            backend.check_gpu_types(matrix.gpu_types)   # before anything is written: Ray would wait forever
        run_path = run_folder.prepare(run_dir(options.results_root, options.run_name))
        with run_folder.RunLock(run_path, options.command) as lock:
            _take_over(lock, run_path, progress)
            summary = _run_with(backend, matrix, options, run_path, progress, environ)
    finally:
        backend.close()
    if summary.missing or summary.all_failed:
        raise RunError(summary.describe())
    return summary


def _take_over(lock, run_path, progress):
    """Say so when a killed run left its lock behind, and remove its scratch folders."""
    if lock.stale is not None:
        progress.note(f"the previous run of {run_path} was killed before it ended "
                      f"({run_folder.describe_holder(lock.stale)}); run.json records it as killed")
    removed = run_folder.clean_scratch(run_path)
    if removed:
        progress.note(f"removed {removed} scratch folder(s) a killed run left in {run_path}")


def _backend_settings(options):
    """What a backend needs beyond a name: only the ray backend takes any (its cluster, its node backend)."""
    if options.backend != "ray":
        return {}
    return {"address": options.ray_address, "node_backend": options.node_backend, "registry": options.registry,
            "build_options": options.build_options}


def _run_with(backend, matrix, options, run_path, progress, environ):
    for line in backend.stop_leftovers(run_path):
        progress.note(line)
    gpus = _resolve_gpus(backend, options.device, progress)
    seed = new_order_seed() if options.order_seed is None else options.order_seed
    plans = pending_work(matrix, run_path, force=options.force, retry_failed=options.retry_failed, order_seed=seed)
    check_resume(plans, matrix, "cuda" if gpus else "cpu", read_manifest(run_path), run_path)
    manifest = start_manifest(run_path, run_name=options.run_name, matrix=matrix, backend=options.backend,
                              device=options.device, gpus=gpus, note=options.note, command=options.command,
                              order_seed=seed)
    progress.note(backend.describe())
    status, summary = "failed", RunSummary(run_path, [])
    try:
        backend.prepare([matrix.images[name] for name in dict.fromkeys(p.image_name for p in plans if p.pending)],
                        emit=lambda name, line: progress.note(f"[{name}] {line}"))
        progress.start(sum(len(p.pending) for p in plans), sum(p.done for p in plans))
        _note_recorded(plans, progress)
        slot_plan = None if options.backend == "ray" else _slot_plan(matrix, options, gpus, environ, progress)
        if matrix.calibrate and plans and options.backend != "ray":
            _calibrate(backend, plans[0], slot_plan, matrix, options, gpus, environ, progress, run_path)
        if slot_plan is None and matrix.exclusive_timing:
            progress.note("exclusive_timing: this run has no slots (one runner at a time), so every "
                          "cell is timed alone anyway")
        if options.backend == "ray":
            _run_cluster(backend, plans, summary, matrix, options, gpus, environ, progress)
        elif slot_plan is None:
            _run_images(backend, plans, summary, matrix, options, gpus, environ, progress)
        else:
            _run_slots(backend, plans, slot_plan, summary, matrix, options, gpus, environ, progress, run_path)
        status = "incomplete" if summary.missing else ("failed" if summary.all_failed else "finished")
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        progress.close()
        finish_manifest(run_path, manifest, status, _cell_counts(summary))
    return summary


def _note_recorded(plans, progress):
    """What the records already there say: failures that stay, corrupt ones that get replaced."""
    recorded_failures = sum(p.recorded_failures for p in plans)
    if recorded_failures:
        progress.note(recorded_failures_line(recorded_failures))
    for plan in plans:
        for line in unreadable_lines(plan):
            progress.note(line)


def check_device(matrix, backend_name, device):
    """What a dry run checks of the device: ``--device cuda`` needs a GPU the backend can give.
    (Its value is one of runner.settings' declared choices: the CLI's option derives from them.)"""
    check_gpu_types(matrix, backend_name)
    if device == "cuda":
        _resolve_gpus(create_backend(backend_name), device, NullProgress())


def check_gpu_types(matrix, backend_name):
    """The GPU-type axis needs a backend that places work on GPU types: only the ray backend does."""
    if matrix.gpu_types and backend_name != "ray":
        raise RunError(f"gpu_types {','.join(matrix.gpu_types)}: only --backend ray places work on GPU types "
                       f"(this is --backend {backend_name}); drop --gpu-types / gpu_types, or run on a Ray cluster "
                       "with --backend ray --ray-address HOST:PORT")


def check_backend_options(matrix, options):
    """Refuse what the chosen backend would ignore: the slot options under --backend ray (Ray gives each
    task one GPU and that GPU's share of its node's cores), the cluster options without it."""
    if options.backend == "ray":
        ignored = [("--slots / slots", matrix.slots != AUTO), ("--calibrate / calibrate", matrix.calibrate),
                   ("--exclusive-timing / exclusive_timing", matrix.exclusive_timing),
                   ("--gpu", options.gpu is not None), ("--allow-busy-gpus", options.allow_busy_gpus)]
        given = [name for name, set_ in ignored if set_]
        if given:
            raise RunError(f"{', '.join(given)}: not with --backend ray, which places each unit on one GPU Ray "
                           "assigns, with that GPU's share of its node's cores; drop them, or run on one machine "
                           "with --backend docker (README: Several machines)")
        if options.registry and options.node_backend != "docker":
            raise RunError(f"--registry {options.registry}: images go through a registry only to docker nodes "
                           f"(this is --node-backend {options.node_backend}); drop --registry")
        if options.build_options and (options.registry or options.node_backend != "docker"):
            raise RunError("--ca-bundle, --index-url, --extra-index-url, --base-image: for the image builds on "
                           "docker nodes without --registry; drop them")
        return
    given = [name for name, set_ in [("--ray-address", options.ray_address is not None),
                                     ("--node-backend", options.node_backend != DEFAULT_NODE_BACKEND),
                                     ("--registry", options.registry is not None),
                                     ("--ca-bundle/--index-url/--extra-index-url/--base-image",
                                      options.build_options is not None)] if set_]
    if given:
        raise RunError(f"{', '.join(given)}: only with --backend ray (this is --backend {options.backend}); "
                       "drop them, or add --backend ray")


def _resolve_gpus(backend, device, progress):
    """Whether to hand the runner GPUs; asking for cuda without any is an error."""
    if device == "cpu":
        progress.note("device: cpu (--device cpu)")
        return False
    available = backend.gpus_available()
    if device == "cuda" and not available:
        raise RunError(
            f"--device cuda: the {backend.name} backend has no NVIDIA GPU to give (nvidia-smi finds "
            "none, or Docker lacks the NVIDIA container toolkit). Use --device cpu, or --device auto "
            "to fall back to the CPU."
        )
    progress.note("device: cuda" if available else "device: cpu (no NVIDIA GPU available; --device auto)")
    return available


def _slot_plan(matrix, options, gpus, environ, progress):
    """The run's slots; None for one runner per image (slots auto on a CPU run, or on a GPU run
    whose host nvidia-smi lists no GPU to place, e.g. GPUs that only Docker sees)."""
    if matrix.slots == AUTO and not gpus:
        return None
    try:
        slot_plan = plan_slots(matrix.slots, gpus, gpu_choice(options.gpu, environ) if gpus else ())
    except NoHostGpusError:
        if matrix.slots != AUTO:
            raise
        progress.note("slots auto: the host's nvidia-smi lists no GPU to place; one runner per image")
        return None
    progress.note(slot_plan.describe())
    if gpus:
        check_gpus_free(slot_plan, allow=options.allow_busy_gpus, note=progress.note)
    return slot_plan


def _run_slots(backend, plans, slot_plan, summary, matrix, options, gpus, environ, progress, run_path):
    """The pending cells as units (one model at one batch size in every image) on the run's slots,
    at once; their runners share the run's timing board (runner.timing_board), removed after."""
    progress = Serialized(progress)
    results, lock = _image_results(plans, summary, progress), threading.Lock()
    board = run_folder.make_timing_board(run_path)

    def run_unit(slot, unit, busy):
        for plan, cells in unit.rounds():
            request = _request(plan, matrix, options, gpus, environ)
            # one compile cache per image and slot: two slots never compile into one folder at once
            cache_dir = slot_dir(request.cache_dir, slot.index) if request.cache_dir is not None else None
            request = dataclasses.replace(_unit_request(request, cells), slot=slot, slots=len(slot_plan.slots),
                                          busy_units=busy, cache_dir=cache_dir, timing_board=board,
                                          exclusive_timing=matrix.exclusive_timing)
            _run_request(backend, plan, request, cells, results[plan.label], progress, lock, slot.index)
        progress.slot_running(slot.index)          # idle until its next unit

    torch_of = {name: image.torch_version for name, image in matrix.images.items()}
    try:
        run_on_slots(slot_plan.slots, make_units(plans, torch_of), run_unit, backend.stop_all)
    finally:
        shutil.rmtree(board, ignore_errors=True)


def _calibrate(backend, plan, slot_plan, matrix, options, gpus, environ, progress, run_path):
    """The slots' interference calibration (matrixbench.calibrate) in ``plan``'s image, its runners
    on a timing board of their own (never exclusive), so its records say how many other slots timed."""
    board = run_folder.make_timing_board(run_path)
    try:
        request = dataclasses.replace(_request(plan, matrix, options, gpus, environ), timing_board=board)
        run_calibration(matrix, request, slot_plan.slots if slot_plan else (), backend, progress.note, options.force)
    finally:
        shutil.rmtree(board, ignore_errors=True)


def _run_cluster(backend, plans, summary, matrix, options, gpus, environ, progress):
    """The pending cells as units (the scheduler's, per GPU type), one Ray task each (backends/ray.py)."""
    results = _image_results(plans, summary, progress)

    def on_record(plan, cell, record):
        results[plan.label].ran += 1
        results[plan.label].statuses[record.status.value] += 1
        progress.cell_finished(plan.label, cell, record)

    tasks, parts = [], []
    for gpu_type in matrix.gpu_types or (None,):
        torch_of = {name: image.torch_version for name, image in matrix.images.items()}
        for unit in make_units([plan for plan in plans if plan.gpu_type == gpu_type], torch_of):
            unit_parts = {plan.image_name: UnitPart(plan, _unit_request(_request(plan, matrix, options, gpus, environ),
                                                                        repeats), list(repeats))
                          for plan, repeats in unit.parts}
            name = " ".join(filter(None, [gpu_type, unit.name]))
            runners = tuple(shippable(_unit_request(unit_parts[plan.image_name].request, repeats))
                            for plan, repeats in unit.rounds())
            tasks.append(UnitTask(name, gpu_type, runners, options.node_backend, options.run_name))
            parts.append(unit_parts)
    run = ClusterRun(tasks, parts, gpus, on_record)
    try:
        backend.run_units(run, {key: environ[key] for key in RUNTIME_SECRETS if environ.get(key)}, note=progress.note)
    finally:
        for plan in plans:
            results[plan.label].missing = run.missing(plan)


def _unit_request(request, repeats):
    """The image's request narrowed to one unit's repeats."""
    cells, schedule = schedule_pairs(repeats)
    return dataclasses.replace(request, cells=cells, schedule=tuple(tuple(pair) for pair in schedule))


def _image_results(plans, summary, progress):
    """One ImageResult per plan, in the summary and by label; the progress hears of each image."""
    results = {}
    for plan in plans:
        results[plan.label] = ImageResult(plan.label, plan.out_dir, skipped=plan.done,
                                          recorded_failures=plan.recorded_failures)
        summary.images.append(results[plan.label])
        progress.image_started(plan.label, len(plan.pending), plan.done)
    return results


def _run_images(backend, plans, summary, matrix, options, gpus, environ, progress):
    """One runner at a time: each image's pending cells, round by round across the images
    (``scheduler.rounds``: repeat 0 in every image, then repeat 1, ...; one runner per image when
    each cell runs once)."""
    results, lock = _image_results(plans, summary, progress), threading.Lock()
    for plan, repeats in rounds([(plan, plan.pending) for plan in plans if plan.pending]):
        request = _unit_request(_request(plan, matrix, options, gpus, environ), repeats)
        _run_request(backend, plan, request, repeats, results[plan.label], progress, lock)


def _run_request(backend, plan, request, repeats, result, progress, lock, slot=None):
    """One runner for some cells of one image (in slot ``slot``, if any); ``result`` counts them (under
    ``lock``); the progress shows a slot's current cell: the first whose record has not appeared."""
    plan.out_dir.mkdir(parents=True, exist_ok=True)

    def show_slot(cell):
        if slot is not None:
            progress.slot_running(slot, plan.label, cell)

    def on_record(cell, record):
        with lock:
            result.ran += 1
            result.statuses[record.status.value] += 1
        progress.cell_finished(plan.label, cell, record)
        waiting = watcher.waiting
        show_slot(waiting[0].cell if waiting else None)

    watcher = RecordWatcher(plan.out_dir, repeats, on_record, on_tick=progress.tick)
    show_slot(repeats[0].cell if repeats else None)
    with watcher:
        exit_code = backend.run(request)
    with lock:
        result.exit_code = exit_code if exit_code or result.exit_code is None else result.exit_code
        result.missing += [cell.id for cell in watcher.waiting]


def _request(plan, matrix, options, gpus, environ):
    image = matrix.images[plan.image_name]
    cache_root = options.cache_root or default_cache_root()
    cells, schedule = plan.schedule()
    return RunRequest(
        image_name=plan.image_name,
        cells=cells,
        schedule=tuple(tuple(pair) for pair in schedule),
        order_seed=plan.order_seed,
        # auto on a host whose backend gives GPUs becomes cuda: the runner then fails with
        # the reason if torch cannot use them, instead of measuring on the CPU.
        settings=runner_settings(matrix, "cuda" if gpus else options.device),
        out_dir=plan.out_dir,
        cache_dir=None if options.cold else Path(cache_root) / plan.image_name,
        hf_cache_dir=options.hf_cache_dir or default_hf_cache(),
        gpus=gpus,
        env={**image.env, **{key: environ[key] for key in RUNTIME_SECRETS if environ.get(key)}},
        torch=image.torch,
        image_hash=image.content_hash(),
        gpu_ids=gpu_choice(options.gpu, environ) if gpus else (),
    )


def gpu_choice(gpu, environ):
    """The GPUs asked for: --gpu, else the host's CUDA_VISIBLE_DEVICES; () means all."""
    text = gpu if gpu is not None else environ.get("CUDA_VISIBLE_DEVICES", "")
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _cell_counts(summary):
    return {
        "ran": sum(image.ran for image in summary.images),
        "skipped": sum(image.skipped for image in summary.images),
        "missing": len(summary.missing),
        "statuses": dict(summary.statuses()),
    }
