"""What `matrixbench run --dry-run` prints (``describe_plan``): the plan of a run, in the order the run would take it,
with what it would check first and its bill; nothing is started or written."""
import os

from matrixbench.build.check import cells_to_check
from matrixbench.environments.auto import AUTO
from matrixbench.executors import RAY
from matrixbench.executors.adaptive import bill, bill_settings, policy_of
from matrixbench.executors.scheduler import Estimates, runners_at_once, takes_units
from matrixbench.executors.slots import gpus_placed
from matrixbench.executors.turns import TurnPair, launches, pinned_text
from matrixbench.executors.turns import describe as describe_step
from matrixbench.gpu import host_gpus
from matrixbench.matrix import attribution, expand_cells
from matrixbench.run.noise_check import plan_check
from matrixbench.run.pending import first_repeats, pending_work, recorded_failures_line, unreadable_lines
from runner import axes


def _more_words(cell):
    """The row and column axes' words a dry run's line does not show already (runner.axes: " fullgraph", " tf32")."""
    shown = ("model", "size", "mode", "dtype")
    return "".join(f" {word}" for axis, word in axes.words(cell, (axes.ROW, axes.COLUMN)) if axis.name not in shown)


def describe_plan(matrix, run_path, force, retry_failed, budget_min=None, executor=None, device="auto",
                  noise_check=True, gpu=None, at_once=None):
    """What `run --dry-run` prints: each image's count, the processes in the order the run takes them
    (``scheduler.run_order``, the executors' own order), what the run's noise check would spend (``plan_check``:
    a GPU run's, before the bill; said too where a GPU run skips it), the model check's runner starts
    (matrixbench.build.check, one an environment) and the bill, which includes both, over ``at_once`` (a Ray
    cluster's, where the dry run asked it: ``check_dry_run``), else the executor's runners at once here."""
    lines = attribution.describe(matrix, len(expand_cells(matrix)))
    plans = pending_work(matrix, run_path, force=force, retry_failed=retry_failed)
    for plan in plans:
        failed = f" ({recorded_failures_line(plan.recorded_failures)})" if plan.recorded_failures else ""
        lines.append(f"{plan.label}: {len(plan.pending)} to run, {plan.done} done{failed} -> {plan.out_dir}")
        lines += [f"  {line}" for line in unreadable_lines(plan)]
    gpus = device == "cuda" or (device == "auto" and bool(host_gpus()))
    units = takes_units(executor, matrix.slots, gpus)
    torch_of = {name: image.torch_version for name, image in matrix.images.items()}
    steps = launches(plans, matrix, units, torch_of)
    in_turns = any(isinstance(step, TurnPair) for step in steps)
    pinned = pinned_text(matrix.turns_cores, units, executor == RAY) if in_turns else ""
    if steps:
        how = ("model by model (one model and batch size at a time, longest first; images in turn, round by "
               "round)" if units else "image by image, round by round, one runner at a time")
        how += "; an image comparison's two runners at once, in turns (turns: true)" if in_turns else ""
        lines.append(f"in the order the run takes them, {how}; each runner's modes in an order the run's own seed "
                     "shuffles (a fresh one each run, kept in run.json's order_seed; shown here in one such order):")
        repeats = first_repeats(matrix) > 1
        lines += [f"  [runner {number}] {work.label}: {r.cell.model} {r.cell.mode} bs={r.cell.batch_size} "
                  f"{r.cell.dtype}{_more_words(r.cell)}" + (f" repeat {r.index + 1}" if repeats else "")
                  + (f" ({how_run})" if how_run else "")
                  for number, step in enumerate(steps, 1) for work, r, how_run in describe_step(step, pinned)]
    pending = [plan for plan in plans if plan.pending]
    check = plan_check(gpus, pending, noise_check, executor)
    estimates = Estimates(settings=bill_settings(matrix))
    start = estimates.runner_start_s(pending)
    lines.append(check.dry_run_line(start))
    checked = [plan for plan in pending if cells_to_check(plan, matrix)]
    checks = 0 if executor == RAY else len({matrix.images[plan.image_name].build_of or plan.image_name
                                            for plan in checked})
    if checks:
        lines.append("model check: before any cell, each pending model (but a shipped one with random weights in an "
                     "image of a transformers within the releases the project's images span) built on the meta "
                     f"device (no weights, no timing) once in each environment: {checks} runner start(s) with docker "
                     "or venv (one build each), 1 with --backend local; a model that does not build refuses the run")
    gpu_count = gpus_placed(gpu, os.environ) if gpus and matrix.slots == AUTO and executor != RAY else 0
    parallel = at_once or runners_at_once(executor, matrix.slots, gpus, gpu_count)   # what will run at once
    return "\n".join([*lines, bill(policy_of(matrix, budget_min), plans, parallel, estimates,
                                   runners=len(steps) + checks,   # the model check's starts
                                   noise_check_s=check.seconds(start))])   # the estimates carry the settings
