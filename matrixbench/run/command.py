"""``matrixbench run``: run a matrix's pending cells through an executor and an environment.

Records land in ``results/<run>/<image>/<cell_id>.json`` (the run name defaults to "default"; the
layout is ``matrixbench.run.layout``'s), ``results/<run>/run.json`` is the run's manifest. Cells that
already have a record are skipped unless ``force``; failed ones rerun with ``retry_failed``.

``run_matrix`` builds one ``executors.base.Run`` (the matrix, the options, the environment that starts
each runner, the run folder, the GPUs, the pending work) and hands it to the executor: ``sequential``
(one runner at a time), ``slots`` (one runner per slot at once) or ``ray`` (one task per unit on a
cluster). Ctrl-C stops the runners and keeps every finished record.
"""
import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from matrixbench.build.cuda_builds import refuse_builds
from matrixbench.build.images import BuildOptions
from matrixbench.environments.base import Environment, Placement, RunRequest, Starter
from matrixbench.errors import RunError
from matrixbench.executors import adaptive, check_options, create_environment, create_executor, slots
from matrixbench.executors.base import Run, RunSummary
from matrixbench.executors.ray.options import RayOptions
from matrixbench.executors.scheduler import Estimates, positions, runners_at_once, takes_units
from matrixbench.executors.turns import launches, slot_cores
from matrixbench.gpu import GpusUnreachableError, host_gpus
from matrixbench.matrix import Matrix
from matrixbench.matrix.comparisons import roles_of
from matrixbench.run import folder as run_folder
from matrixbench.run.at_once import AtOnce
from matrixbench.run.layout import MODEL_CHECK_DIRNAME, run_dir
from matrixbench.run.manifest import finish_manifest, read_manifest, record_order, start_manifest, update_manifest
from matrixbench.run.pending import ImageWork, new_order_seed, pending_work, recorded_failures_line, unreadable_lines
from matrixbench.run.placement import AUTO, plan_slots
from matrixbench.run.progress import NullProgress, Progress
from matrixbench.run.resume import check_resume
from matrixbench.run.signals import signal_name
from runner.core import Cell

DEFAULT_RUN = "default"


@dataclass(frozen=True)
class RunOptions:
    run_name: str = DEFAULT_RUN
    results_root: Path = Path("results")
    backend: str = "docker"               # the environment: docker, venv or local (on a Ray node: its own)
    executor: Optional[str] = None        # sequential, slots or ray; None: slots where the run has slots
    device: str = "auto"
    force: bool = False
    retry_failed: bool = False
    cold: bool = False
    cache_root: Optional[Path] = None     # None: paths.compile_cache_root()
    hf_cache_dir: Optional[Path] = None   # None: paths.hf_cache_home()
    note: Optional[str] = None
    command: Tuple[str, ...] = ()
    gpu: Optional[str] = None             # --gpu: indices or UUIDs, comma-separated; None: CUDA_VISIBLE_DEVICES
    allow_busy_gpus: bool = False         # slots: run even where another process uses a slot's GPU
    order_seed: Optional[int] = None      # the seed of the run order; None: a fresh one (recorded in run.json)
    ray: RayOptions = RayOptions()        # --executor ray's own options (the cluster, the registry)
    build_options: Optional[BuildOptions] = None   # the builds of this run: a venv here, or on Ray's docker nodes
    budget_min: Optional[float] = None    # --budget: wall minutes of the run; past it no process starts
    noise_check: bool = True              # a GPU run first measures the host's noise (--no-noise-check: not)


def run_matrix(matrix: Matrix, options: RunOptions, progress: Optional[Progress] = None,
               environ: Optional[Mapping[str, str]] = None) -> RunSummary:
    """Run every pending cell of ``matrix``; return a RunSummary.

    The run folder is locked for the whole run (a second run on it is refused). Raises
    RunError when GPUs are asked for but unavailable, when cells end without a record, or when
    every cell of the run failed (the summary is in the message); KeyboardInterrupt passes
    through after the runners stopped and run.json says "interrupted" with the cells that ran.
    """
    progress = progress or NullProgress()
    environ = os.environ if environ is None else environ
    check_options(matrix, options)
    environment = create_environment(options)
    try:
        if matrix.gpu_types:
            environment.check_gpu_types(matrix.gpu_types)   # before anything is written: Ray would wait forever
        if matrix.turns and matrix.turns_cores and len(matrix.images) > 1:   # one image: no pair takes turns
            environment.check_turns_cores(matrix.turns_cores, matrix.gpu_types, options.device)   # (Ray's nodes)
        run_path = run_folder.prepare(run_dir(options.results_root, options.run_name))
        with run_folder.RunLock(run_path, options.command) as lock:
            _take_over(lock, run_path, progress, environment)
            summary = _run_with(environment, matrix, options, run_path, progress, environ)
    finally:
        environment.close()
    if summary.missing or summary.all_failed:
        raise RunError(summary.describe())
    return summary


def _take_over(lock: run_folder.RunLock, run_path: Path, progress: Progress, environment: Environment) -> None:
    """Say so when a killed run left its lock behind; stop what it left running (its containers),
    then remove its scratch folders."""
    for line in environment.stop_leftovers(run_path):
        progress.note(line)
    if lock.stale is not None:
        progress.note(f"the previous run of {run_path} was killed before it ended "
                      f"({run_folder.describe_holder(lock.stale)}); run.json records it as killed")
    removed = run_folder.clean_scratch(run_path)
    if removed:
        progress.note(f"removed {removed} scratch folder(s) a killed run left in {run_path}")


def _run_with(environment: Environment, matrix: Matrix, options: RunOptions, run_path: Path, progress: Progress,
              environ: Mapping[str, str]) -> RunSummary:
    policy = adaptive.policy_of(matrix, options.budget_min)
    started = time.time()       # --force with repeats auto: only records written from here on count
    budget = adaptive.Budget(policy.budget_s)   # from here: the run's wall time counts
    gpus = _resolve_gpus(environment, options.device, progress)
    seed = new_order_seed() if options.order_seed is None else options.order_seed
    works = pending_work(matrix, run_path, force=options.force, retry_failed=options.retry_failed, order_seed=seed)
    check_resume(works, matrix, "cuda" if gpus else "cpu", read_manifest(run_path), run_path,
                 environment.installed_versions())
    environment.refuse([matrix.images[w.image_name] for w in works if w.pending])
    manifest = start_manifest(run_path, run_name=options.run_name, matrix=matrix,
                              backend=environment.name, device=options.device, gpus=gpus,
                              note=options.note, command=options.command, order_seed=seed)
    progress.note(environment.describe())
    torch_of = {name: image.torch_version for name, image in matrix.images.items()}
    units = takes_units(options.executor, matrix.slots, gpus)
    run = Run(matrix, options, environment, run_path, gpus, environ, works, progress)
    status, stopped_by = "failed", None
    try:
        builds = dict.fromkeys(matrix.images[w.image_name].build_of or w.image_name for w in works if w.pending)
        environment.prepare([matrix.images[name] for name in builds],   # an A/A twin runs in its original's build
                            emit=lambda name, line: progress.note(f"[{name}] {line}"))
        if gpus and environment.builds_images:   # before any cell runs (a Ray driver builds nothing here)
            refuse_builds({name: matrix.images[name] for name in builds}, environment.build_facts, progress.note)
        _model_check(environment, run, progress)     # a model an image cannot build: refused before any cell
        manifest = _noise_check(environment, run, manifest, progress)   # what the host resolves, then the bill
        at_once = _runners_at_once(environment, matrix, options, gpus, environ)
        progress.note(adaptive.bill(policy, works, at_once,
                                    runners=len(launches(works, matrix, units, torch_of)),
                                    settings=adaptive.bill_settings(matrix)))
        progress.start(sum(len(w.pending) for w in works), sum(w.done for w in works))
        _note_recorded(works, progress)
        executor = create_executor(environment, options, matrix=matrix, gpus=gpus, environ=environ,
                                   note=progress.note)
        slot_plan = getattr(executor, "slot_plan", None)
        budget.at_once = AtOnce.here(len(slot_plan.slots)) if slot_plan else at_once   # as the bill counts them
        waves = adaptive.Waves(policy, works, budget, since=started if options.force else None,
                               roles=roles_of(matrix))
        run.summary.repeats = waves.outcome
        for wave in waves:      # repeats auto: more waves while comparisons are undecided (executors.adaptive)
            if waves.outcome.waves > 1:
                progress.more(sum(len(work.pending) for work in wave))
            manifest = record_order(run_path, manifest, positions([(work, work.pending) for work in wave]))
            run.next_wave(wave)   # calibrated in the first wave only
            executor.run(run)
        manifest = update_manifest(run_path, manifest, repeats=waves.outcome.to_dict())
        status = "incomplete" if run.summary.missing else ("failed" if run.summary.all_failed else "finished")
    except KeyboardInterrupt as exc:
        status, stopped_by = "interrupted", signal_name(exc)
        raise
    finally:
        progress.close()
        finish_manifest(run_path, manifest, status, _cell_counts(run.summary), stopped_by=stopped_by)
    return run.summary


def _runners_at_once(environment: Environment, matrix: Matrix, options: RunOptions, gpus: bool,
                     environ: Mapping[str, str]) -> AtOnce:
    """The bill's runners at once: the environment's where it decides (a Ray cluster's nodes, asked now), else what
    the executor will run here (``scheduler.runners_at_once``)."""
    asked = environment.runners_at_once(matrix.gpu_types, gpus)
    if asked is not None:
        return asked
    placed = slots.gpus_placed(options.gpu, environ) if gpus and matrix.slots == AUTO else 0
    return runners_at_once(options.executor, matrix.slots, gpus, placed)


def _model_check(environment: Environment, run: Run, progress: Progress) -> None:
    """Before any cell: each pending model (but a shipped one with random weights in an image of a transformers
    within the releases the project's images span: ``needs_run_check``) built on the meta device once in each
    environment that will run it (matrixbench.build.check: a runner's --check, its answer in .model-check/ of the
    environment's first image folder, the first thing the run writes there); a model that does not build refuses the
    run (MatrixError naming model, image, versions and the fix). The Ray executor starts no runner here: its nodes
    build each model in their first cell (``validate --build`` asks beforehand), and the run says so."""
    from matrixbench.build.check import cells_to_check, check_paths, check_work, environment_image, refuse_unbuildable

    pending = [(work, cells) for work in run.works if (cells := cells_to_check(work, run.matrix))]
    if not pending:
        return   # nothing pending, or only shipped models with random weights: no check runner starts
    if not isinstance(environment, Starter):
        progress.note("model check: not run (the Ray executor starts its runners on its nodes; `matrixbench "
                      "validate --build` builds each model in each image beforehand)")
        return
    asked: Dict[str, Tuple[RunRequest, List[Cell]]] = {}   # environment -> its request, the cells it will run
    for work, cells in pending:
        request = run.request(work)
        image = environment_image(environment.name, request.image)
        asked.setdefault(image.built_as, (dataclasses.replace(request, image=image), []))[1].extend(cells)
    requests = [dataclasses.replace(request, work=check_work(checked, run.matrix), placement=Placement(),
                                    paths=check_paths(Path(request.paths.out_dir) / MODEL_CHECK_DIRNAME,
                                                      run.options.hf_cache_dir))
                for request, checked in asked.values()]
    refuse_unbuildable(environment, requests, progress.note)


def _noise_check(environment: Environment, run: Run, manifest: Dict[str, object],
                 progress: Progress) -> Dict[str, object]:
    """A GPU run's host-noise check once its images are ready, before its bill and its first cell (so whoever reads
    its warning can stop before paying for the cells; matrixbench.run.noise_check.run_check: a small launch-bound
    model in the first pending image's environment, about 10 s): its lines printed, its result in
    <run>/noise_check.json and run.json's ``noise_check``. Never a failure; --no-noise-check skips it."""
    from matrixbench.run.noise_check import NONE, NOT_MEASURED, RAY_WHY, SKIPPED, plan_check, run_check

    pending = [work for work in run.works if work.pending]
    plan = plan_check(run.gpus, pending, run.options.noise_check, run.options.executor)
    if plan.planned == NONE:
        return manifest
    checked: Mapping[str, object]
    if plan.planned == SKIPPED:
        progress.note(f"noise check: skipped ({plan.why})")
        checked = {"status": SKIPPED, "why": plan.why}
    elif plan.planned == NOT_MEASURED or not isinstance(environment, Starter):   # (Ray's starts none here)
        why = plan.why or RAY_WHY     # a MEASURE plan, but an environment that starts no runner here (Ray's)
        progress.note(f"noise check: not run ({why})")
        checked = {"status": NOT_MEASURED, "why": why}
    else:
        progress.note(f"noise check: measuring this host's noise with a small launch-bound model (about "
                      f"{plan.seconds(Estimates().runner_start_s(pending)):.0f} s; --no-noise-check skips it)")
        checked = run_check(environment, run.request(pending[0]), run.path, progress.note)
    updated: Dict[str, object] = update_manifest(run.path, manifest, noise_check=dict(checked))
    return updated


def _note_recorded(works: List[ImageWork], progress: Progress) -> None:
    """What the records already there say: failures that stay, corrupt ones that get replaced."""
    recorded_failures = sum(w.recorded_failures for w in works)
    if recorded_failures:
        progress.note(recorded_failures_line(recorded_failures))
    for work in works:
        for line in unreadable_lines(work):
            progress.note(line)


def check_dry_run(matrix: Matrix, options: RunOptions) -> Optional[AtOnce]:
    """What a dry run refuses, the way the real run refuses it before anything runs: options the executor
    would ignore (``check_options``), ``--device cuda`` without a GPU the environment can give, and records
    this run would skip that were measured differently (``check_resume``; the device compared only when
    --device names it: finding out what auto gets would start the backend). Writes nothing. Returns the
    environment's runners at once where it asked the environment anyway (a Ray cluster, with --device cuda), for
    the bill; else None."""
    check_options(matrix, options)
    device = None if options.device == "auto" else options.device
    environment = create_environment(options)
    asked = None
    if device == "cuda":
        _resolve_gpus(environment, device, NullProgress())
        asked = environment.runners_at_once(matrix.gpu_types, True)
    environment.refuse(list(matrix.images.values()))
    if isinstance(matrix.slots, int) and device is not None and takes_units(options.executor, matrix.slots,
                                                                              device == "cuda"):
        slot_plan = plan_slots(matrix.slots, device == "cuda")   # more slots than cores (or GPUs) is refused here too
        if matrix.turns:
            slot_cores(matrix.turns_cores, slot_plan.slots)      # and more turns_cores than a slot has
    run_path = run_dir(options.results_root, options.run_name)
    works = pending_work(matrix, run_path, force=options.force, retry_failed=options.retry_failed)
    check_resume(works, matrix, device, read_manifest(run_path), run_path, environment.installed_versions())
    return asked


def _resolve_gpus(environment: Environment, device: str, progress: Progress) -> bool:
    """Whether to hand the runner GPUs; asking for cuda without any is an error."""
    if device == "cpu":
        progress.note("device: cpu (--device cpu)")
        return False
    available = environment.gpus_available()
    if device == "cuda" and not available:
        raise RunError(
            f"--device cuda: the {environment.name} backend has no NVIDIA GPU to give (nvidia-smi finds "
            "none, or Docker lacks the NVIDIA container toolkit). Use --device cpu, or --device auto "
            "to fall back to the CPU."
        )
    if not available and device == "auto":
        check_host_gpus_unused(environment)
    progress.note("device: cuda" if available else "device: cpu (no NVIDIA GPU available; --device auto)")
    return bool(available)


def check_host_gpus_unused(environment: Environment) -> None:
    """A host whose nvidia-smi lists GPUs never runs the matrix on the CPU unless --device cpu asks:
    raise GpusUnreachableError when the backend cannot hand them over (--backend auto falls back on it)."""
    gpus = host_gpus()
    if gpus:
        names = ", ".join(sorted({gpu.name for gpu in gpus}))
        raise GpusUnreachableError(
            f"--device auto: this host has {len(gpus)} NVIDIA GPU(s) ({names}), but the {environment.name} backend "
            "cannot hand them over (a container asking for GPUs sees none: the NVIDIA container toolkit is "
            "missing, or no image is built). Not running the matrix on the CPU. Fix: install the toolkit "
            "(`matrixbench doctor` says how), or --backend venv (one venv per image, on these GPUs), or "
            "--device cpu to time on the CPU on purpose")


def _cell_counts(summary: RunSummary) -> Dict[str, object]:
    return {
        "ran": sum(image.ran for image in summary.images),
        "skipped": sum(image.skipped for image in summary.images),
        "missing": len(summary.missing),
        "statuses": dict(summary.statuses()),
    }
