"""The command line: the only module that imports click.

Each command parses its options, calls one library function, and turns a MatrixbenchError into
a message on stderr and its exit code (2 matrix/usage, 3 Docker, 4 build, 5 run, 6 report;
9 filesystem (disk full, read-only, permission); 128 + the signal when stopped: 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
"""
import contextlib
import dataclasses
import errno
import functools
import importlib
import math
import os
import sys
from pathlib import Path

import click
from click.core import ParameterSource

from matrixbench.build.cuda_builds import refuse_on_this_host
from matrixbench.build.images import BuildOptions
from matrixbench.environments import auto, backend_names
from matrixbench.environments.auto import AUTO
from matrixbench.errors import FILESYSTEM_EXIT_CODE, FolderError, MatrixbenchError, describe_os_error
from matrixbench.executors import EXECUTORS, RAY
from matrixbench.executors.ray.options import RayOptions
from matrixbench.matrix import Overrides, load_matrix
from matrixbench.matrix import strict_yaml as matrix_yaml
from matrixbench.matrix.aa import aa_matrix
from matrixbench.matrix.aa import default_run_name as aa_run_name
from matrixbench.matrix.prices import parse_price_option
from matrixbench.matrix.settings import BUILD_FLAGS, BUILD_SETTINGS, BY_NAME, MATRIX_SETTINGS, OVERRIDES
from matrixbench.redact import redact_urls
from matrixbench.report_formats import REPORT_FORMATS
from matrixbench.run.command import DEFAULT_RUN, RunOptions, check_dry_run, run_matrix
from matrixbench.run.dry_run import describe_plan
from matrixbench.run.layout import run_dir
from matrixbench.run.manifest import unfinished_runs
from matrixbench.run.noise_check import NOISE_CHECK_S
from matrixbench.run.progress import make_progress
from matrixbench.run.signals import exit_code, signal_name, stop_signals
from runner import axes

DEFAULT_MATRIX = "matrix.yaml"
BUILD_BACKENDS = ("docker", "venv")
CHECK_BACKENDS = ("docker", "venv", "local")   # validate --build: where an image's runner starts


# --- option helpers ------------------------------------------------------------------------

def _comma_list(choices=None, convert=str):
    """A callback: "a,b" (option repeatable) -> ["a", "b"]; None when not given."""
    def callback(ctx, param, values):
        if not values:
            return None
        items = [item.strip() for value in values for item in value.split(",") if item.strip()]
        if choices is not None:
            unknown = [item for item in items if item not in choices]
            if unknown:
                raise click.BadParameter(f"{', '.join(unknown)}: valid are {', '.join(choices)}")
        try:
            return [convert(item) for item in items]
        except ValueError:
            raise click.BadParameter(
                f"expected a comma-separated list of integers, got {','.join(values)}") from None
    return callback


def _stack(*decorators):
    def apply(function):
        for decorator in reversed(decorators):
            function = decorator(function)
        return function
    return apply


matrix_option = click.option(
    "--matrix", "matrix_path", type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_MATRIX, show_default=True, help="The matrix file.")
images_option = click.option(
    "--images", multiple=True, callback=_comma_list(), metavar="NAMES",
    help="Only these images, comma-separated (e.g. stable,nightly).")

FLAG_ALIASES = {"dtypes": ("--dtype",)}
_CLICK_TYPES = {"integer": int, "number": float, "string": str}


def _auto_or(convert):
    """A click type for a setting that also takes "auto" (in any case: AUTO, Auto)."""
    def parse(text):
        if isinstance(text, str) and text.strip().lower() == "auto":
            return "auto"
        try:
            return convert(text)
        except ValueError:
            kind = "an integer" if convert is int else "a number"
            raise click.BadParameter(f"{text!r} is neither {kind} nor 'auto'") from None
    parse.__name__ = f"auto or {convert.__name__}"
    return parse


class FinitePositive(click.ParamType):
    """A number above 0 that is finite: "nan", "inf" and "1e400" are refused (click.FloatRange takes them)."""

    name = "finite number > 0"

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number) or number <= 0:
            self.fail(f"{value!r} is not a finite number above 0", param, ctx)
        return number


def _setting_option(setting):
    """The override option of one declared setting (runner.settings). Click only parses the
    value; load_matrix checks it, with the file's values, against the one schema."""
    names = (setting.flag, *FLAG_ALIASES.get(setting.name, ()), setting.name)
    if setting.kind == "boolean" and setting.default is True:   # on by default: --no-<flag> turns it off
        return click.option(f"{setting.flag}/--no-{setting.flag[2:]}", setting.name, default=None, help=setting.help)
    if setting.kind == "boolean":   # a flag: given is True, left out leaves the matrix's value
        return click.option(*names, is_flag=True, default=None, help=setting.help)
    convert = _auto_or(_CLICK_TYPES[setting.kind]) if setting.auto else _CLICK_TYPES[setting.kind]
    if setting.many:
        return click.option(*names, multiple=True, callback=_comma_list(convert=convert),
                            metavar=setting.name.upper(), help=setting.help)
    choices = f" One of {', '.join(setting.choices)}." if setting.choices else ""
    return click.option(*names, type=convert, help=setting.help + choices)


def _checked_setting(name):
    """A callback: the value, checked against the setting's declaration (its bounds)."""
    def callback(ctx, param, value):
        problem = None if value is None else BY_NAME[name].problem(value)
        if problem:
            raise click.BadParameter(problem)
        return value
    return callback


def _key_values(ctx, param, values):
    """``--set KEY=VALUE`` (repeatable) -> {KEY: VALUE}, the value read as YAML (true, 0.05, [1, 4])."""
    pairs = {}
    for text in values:
        key, equals, value = text.partition("=")
        if not equals or key.strip() not in SETTABLE:
            raise click.BadParameter(f"{text!r}: give KEY=VALUE with KEY one of {', '.join(SETTABLE)}")
        pairs[key.strip()] = matrix_yaml.value(value)
    return pairs


SETTABLE = tuple(setting.name for setting in MATRIX_SETTINGS)   # --set: any setting matrix.yaml takes
set_option = click.option(
    "--set", "settings", multiple=True, metavar="KEY=VALUE", callback=_key_values,
    help="Any setting of matrix.yaml, for this command (repeatable; VALUE as YAML, e.g. "
         "--set fullgraph=true --set cv_threshold=0.05). Keys: " + ", ".join(SETTABLE) + ".")
override_options = _stack(
    images_option,
    click.option("--models", multiple=True, callback=_comma_list(), metavar="NAMES",
                 help="Only these models, comma-separated (e.g. vit,detr-resnet-101)."),
    *(_setting_option(setting) for setting in OVERRIDES),
    set_option,
)


def _overrides(options):
    names = ("images", "models", *(setting.name for setting in OVERRIDES))
    return Overrides(**{name: options.get(name) for name in names}, sets=options.get("settings") or {})


def _load(matrix_path, overrides):
    return load_matrix(matrix_path, overrides)


def handles_errors(command):
    """Turn MatrixbenchError into stderr + its exit code, Ctrl-C into exit 130."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            with stop_signals():
                return command(*args, **kwargs)
        except MatrixbenchError as exc:
            click.echo(f"error: {redact_urls(exc.worded_for(command.__name__))}", err=True)   # no URL's credentials
            sys.exit(exc.exit_code)
        except OSError as exc:   # the filesystem said no: one line, never a traceback
            click.echo(f"error: {describe_os_error(exc)}", err=True)
            sys.exit(FILESYSTEM_EXIT_CODE)
        except KeyboardInterrupt as exc:
            click.echo(f"\ninterrupted ({signal_name(exc)}): finished records are kept; rerun the same command "
                       "to resume", err=True)
            sys.exit(exit_code(exc))
    return wrapper


@contextlib.contextmanager
def names_folder(flag, folder):
    """An OSError on ``folder``, in it or on the way to it becomes a FolderError naming ``flag`` (the option
    that chose the folder) and, unless the message names a way out already, to choose another."""
    try:
        yield
    except OSError as exc:
        if not isinstance(exc.filename, str):
            raise
        failed, chosen = Path(os.path.abspath(exc.filename)), Path(os.path.abspath(folder))
        if not (failed == chosen or chosen in failed.parents or failed in chosen.parents):
            raise
        text = describe_os_error(exc)
        way_out = "" if exc.errno == errno.ENOSPC or flag in text else f"; choose another {flag}"
        raise FolderError(f"{flag}: {text}{way_out}") from None


def _library(module, name, command):
    """A function of a module that may be missing from this checkout."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise MatrixbenchError(f"`matrixbench {command}` is not available here: {module}.{name} ({exc})") from exc


# --- commands ------------------------------------------------------------------------------

@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="matrixbench")
def main():
    """Measure how much faster torch.compile makes Hugging Face vision models."""


@main.command()
@matrix_option
@override_options
@click.option("--build", "build_models", is_flag=True,
              help="Also build every model on the meta device (no memory, no weights) in each image, with "
                   "its own torch and transformers (the runner's --check, started by --backend), naming each "
                   "image and model that does not build.")
@click.option("--backend", type=click.Choice(CHECK_BACKENDS), default="docker", show_default=True,
              help="With --build: docker: in a container of each built image; venv: in each image's venv; "
                   "local: once, in this interpreter (its torch, whatever the images pin).")
@handles_errors
def validate(matrix_path, build_models, backend, **options):
    """Check the matrix file (and overrides) and list its images, models and cells; with --build,
    also build each model in each image."""
    matrix = _load(matrix_path, _overrides(options))
    click.echo(describe_matrix(matrix))
    refuse_on_this_host(matrix, list(matrix.images), backend=backend)
    if build_models:
        from matrixbench.build.check import build_models as build
        from matrixbench.build.check import check_built, describe_build

        checks = build(matrix, backend)
        click.echo(describe_build(checks))
        check_built(checks)


def selftest_options(command):
    for option in reversed([
        click.option("--run", "run_name", default=DEFAULT_RUN, show_default=True,
                     help="The run whose folder keeps the result (RESULTS/RUN/selftest.json)."),
        click.option("--results", "results_root", type=click.Path(file_okay=False, path_type=Path),
                     default="results", show_default=True, help="Results folder."),
        click.option("--python", "python", help="The interpreter with torch to test (default: this one)."),
    ]):
        command = option(command)
    return command


@main.command()
@selftest_options
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
              help="cuda: the GPU checks; cpu: the CPU part only; auto: cuda when torch sees a GPU.")
@handles_errors
def selftest(run_name, results_root, python, device):
    """Check the measuring apparatus on this machine in under five minutes: a kernel of known duration, a
    matmul against the GPU's peak, CUDA-graph replays counted, NVML counters, the wall-clock cross-check,
    timing with and without per-iteration events (on the CPU, its CPU part). Exit code 10 when a check fails."""
    from matrixbench.selftest import run_selftest

    with names_folder("--results", results_root):
        run_selftest(run_dir(results_root, run_name), device=device, python=python, emit=click.echo)


@main.command()
@matrix_option
@click.option("--backend", type=click.Choice(["auto", "docker", "venv", "local"]), default="auto", show_default=True,
              help="The backend to check for: Docker's checks fail only for docker; auto falls back to venvs, and "
              "skips what MATRIXBENCH_AUTO_SKIP names (gpu, docker, venv) as `run --backend auto` does.")
@click.option("--measure", is_flag=True, help="Then measure this host's noise (about 20 s: steal, preemptions, the "
              "jitter of a CPU loop and, in the selftest's interpreter, of a small launch-bound model, on the GPU "
              "with its CUDA-graph replay; what change a comparison can resolve here) and run `matrixbench "
              "selftest` (the measuring apparatus). Without a GPU, their CPU part (exit 7 all the same).")
@selftest_options
@handles_errors
def doctor(matrix_path, backend, measure, run_name, results_root, python):
    """Check this machine before paying for GPU time: driver and GPUs, Docker, GPUs in a
    container, which backend runs, each image's CUDA build against the driver and GPUs, other GPU
    processes, persistence and clocks, disk, HF cache. Every failure comes with its fix; exit code 7
    when a check fails."""
    from matrixbench.doctor import (
        DRIVER,
        GPUS_LEFT_OUT_MEASURE,
        NO_GPU_MEASURE,
        DoctorError,
        checklist,
        diagnose,
        measure_device,
        report,
    )
    from matrixbench.selftest import SelftestError

    checks = diagnose(load_matrix(matrix_path), backend=backend)
    try:
        click.echo(report(checks))
    except DoctorError as exc:
        if not measure:
            raise
        if measure_device(checks) is None:
            raise DoctorError(f"{exc}\nselftest not run: fix the failures above first (or run `matrixbench "
                              "selftest`)") from None
        click.echo(checklist(checks) + "\n" + NO_GPU_MEASURE)
        no_gpu = f"1 check failed ({DRIVER}): no GPU here, so --measure measured the CPU part only (above)"
        try:
            measure_host(python, results_root, run_name, "cpu")
        except SelftestError as failed:   # its own exit code is 10; doctor's failure stays exit 7
            raise DoctorError(f"{no_gpu}; and {failed}") from None
        raise DoctorError(no_gpu) from None
    if measure:
        device = measure_device(checks)
        if device == "cpu":
            click.echo(GPUS_LEFT_OUT_MEASURE)
        measure_host(python, results_root, run_name, device or "auto")


def measure_host(python, results_root, run_name, device):
    """doctor --measure: the host's noise, then the selftest (``device``: auto, or cpu without a GPU)."""
    from matrixbench.host_noise import doctor_check
    from matrixbench.selftest import run_selftest

    doctor_check(python=python, emit=click.echo)
    with names_folder("--results", results_root):
        run_selftest(run_dir(results_root, run_name), device=device, python=python, emit=click.echo)


def _local_source(model):
    """Where a local model comes from: its config.json, or with its own weights the folder they are in."""
    folder = str(Path(model.config_path).parent)
    return f"folder {folder}" if model.weights == "pretrained" else f"config {model.config_path}"


def describe_matrix(matrix):
    cells = len(matrix.models) * len(matrix.batch_sizes) * len(matrix.modes) * len(matrix.dtypes)
    lines = [f"{matrix.path}: valid"]
    lines += [f"  image {name}: {image.torch}, python {image.python}, {image.transformers}"
              for name, image in matrix.images.items()]
    lines.append(f"  models: {', '.join(matrix.models)}")
    lines += [f"  model {name}: {_local_source(model)}, {model.weights} weights, {model.task}, files {model.model_hash}"
              for name, model in matrix.models.items() if model.model_hash]
    lines += [f"  model {name}: hub {model.model_id} at revision {model.revision}, {model.weights} weights, "
              f"{model.task}" for name, model in matrix.models.items() if model.revision]
    lines.append(f"  batch sizes {list(matrix.batch_sizes)}, modes {list(matrix.modes)}, "
                 f"dtypes {list(matrix.dtypes)}, size {matrix.size}, {matrix.iterations} iterations")
    lines.append(f"  {cells} cells per image, {cells * len(matrix.images)} in all")
    if matrix.build.given():
        lines.append("  build: " + ", ".join(f"{name} {redact_urls(_text(getattr(matrix.build, name)))}"
                                             for name in matrix.build.given()))
    return "\n".join(lines)


def _text(value):
    return ",".join(value) if isinstance(value, tuple) else str(value)


def _build_flag(setting):
    """`matrixbench build`'s override of one build setting (settings.BUILD_FLAGS); a CA bundle's path is
    this directory's (made absolute: matrix.yaml's relative paths are the matrix file's)."""
    kind = {"type": click.Path(exists=True, dir_okay=False, resolve_path=True)} if setting.name == "ca_bundle" else {}
    many = {"multiple": True} if setting.many else {}
    repeat = " Repeatable." if setting.many else ""
    return click.option(setting.flag, setting.name, **kind, **many,
                        help=f"{setting.help}{repeat} Overrides `{setting.name}:` of the matrix.")


build_flags = _stack(*(_build_flag(setting) for setting in BUILD_FLAGS))


def _moved_to_build(setting):
    """What `run` says of a build setting's flag: where the setting goes now."""
    flag = setting.flag or f"--{setting.name.replace('_', '-')}"
    key = f"`{setting.name}:` in matrix.yaml or --set {setting.name}=VALUE"
    if setting.flag:
        return (f"{flag} is a build option: `matrixbench build {flag} ...`, or {key} (read by run --backend auto "
                "and by --executor ray's docker nodes when they build)")
    return f"{flag} is a build setting: {key} (read by --executor ray with docker nodes)"


MOVED_TO_BUILD = {setting.flag or f"--{setting.name.replace('_', '-')}": _moved_to_build(setting)
                  for setting in BUILD_SETTINGS}


@main.command()
@matrix_option
@images_option
@click.option("--backend", type=click.Choice(BUILD_BACKENDS), default="docker", show_default=True,
              help="docker: one image per matrix image; venv: one virtual environment per image "
                   "(in ~/.cache/matrixbench/venvs).")
@click.option("--no-cache", is_flag=True,
              help="Build afresh (docker build --no-cache; a venv is made again from nothing).")
@click.option("--dry-run", is_flag=True, help="Print what would be built; needs no Docker.")
@build_flags
@set_option
@handles_errors
def build(matrix_path, images, backend, no_cache, dry_run, settings, **flags):
    """Build one Docker image (or venv) per matrix image, with the matrix's build settings (index_url,
    extra_index_urls, base_image, ca_bundle) and the flags that override them."""
    given = {name: value for name, value in flags.items() if value not in (None, ())}
    matrix = _load(matrix_path, Overrides(images=images, sets=settings or {}, build=given))
    refuse_on_this_host(matrix, list(matrix.images), backend=backend)
    options = {"no_cache": no_cache, "dry_run": dry_run, **matrix.build.image_options()}
    if backend == "venv":
        if options.pop("base_image"):
            click.echo("note: base_image is for Docker builds; a venv uses the host's Python", err=True)
        build_venvs = _library("matrixbench.build.venvs", "build_venvs", "build")
        build_venvs(matrix, list(matrix.images), on_progress=_echo_build_line, **options)
        return
    build_images = _library("matrixbench.build.images", "build_images", "build")
    build_images(matrix, list(matrix.images), on_progress=_echo_build_line, **options)


def _echo_build_line(image_name, line):
    click.echo(f"[{image_name}] {redact_urls(line)}", err=True)


def _echo_banner(text):
    rule = "=" * 80
    click.echo(f"{rule}\n{redact_urls(text)}\n{rule}", err=True)


# --- run's options in groups ----------------------------------------------------------------
# Each option of `run` declares its help group here, once; those of RUN_RARE stay accepted but leave
# the help (they are rare on `run`: matrix.yaml or --set KEY=VALUE give the settings among them).
RUN_GROUPS = {
    "selection": ("matrix_path", "images", "models", "batch_sizes", "modes", "dtypes", "aa_image", "settings"),
    "measurement": ("repeats", "budget_min", "iterations", "device", "cold"),
    "resume and paths": ("run_name", "results_root", "force", "retry_failed", "note", "dry_run"),
    "placement": ("executor", "slots", "gpu", "calibrate", "ray_address"),
    "environment": ("backend",),
}
RUN_RARE = ("weights", "size", "attention", "warmup", "timeout_s", "calibration_models", "exclusive_timing",
            "gpu_types", "repeats_min", "repeats_max", "margin_pct", "allow_busy_gpus", "cache_root", "hf_cache_dir",
            "attribution", "paired", "min_time_s", "target_stdrel", "max_time_s", "no_noise_check",
            *(axis.name for axis in axes.setting_axes()))   # the axes' own flags (runner.axes)


# Options of `run` (by parameter name) that contradict each other: one would be silently ignored.
RUN_CONFLICTS = ((("force", "retry_failed"), "--force reruns every cell, failed ones included"),
                 (("cold", "cache_root"), "--cold uses no compile cache, so --cache-dir would go unused"))


class GroupedCommand(click.Command):
    """A command whose --help lists its options under the groups RUN_GROUPS declares, and which says where a
    build setting's flag (MOVED_TO_BUILD, derived from settings.BUILD_SETTINGS) goes instead of "no such option"."""

    def parse_args(self, ctx, args):
        try:
            rest = super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            if exc.option_name in MOVED_TO_BUILD:
                raise click.UsageError(MOVED_TO_BUILD[exc.option_name], ctx) from None
            raise
        _refuse_conflicts(ctx, self.params)
        return rest

    def format_options(self, ctx, formatter):
        group_of = {name: group for group, names in RUN_GROUPS.items() for name in names}
        rows = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                rows.setdefault(group_of.get(param.name, "other"), []).append(record)
        for group in [*RUN_GROUPS, "other"]:
            if rows.get(group):
                with formatter.section(f"{group.capitalize()} options"):
                    formatter.write_dl(rows[group])


def _refuse_conflicts(ctx, params):
    """Two options of RUN_CONFLICTS both given on the command line: one would be silently ignored. The flags
    named are the parameters' own."""
    given = {param.name: param.opts[0] for param in params
             if param.name and ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE}
    for (first, second), why in RUN_CONFLICTS:
        if first in given and second in given:
            raise click.UsageError(f"{given[first]} and {given[second]} together: {why}; give one of them", ctx)


def _hide(command, names):
    for param in command.params:
        if param.name in names:
            param.hidden = True
    return command


@main.command(cls=GroupedCommand)
@matrix_option
@override_options
@click.option("--run", "run_name", default=DEFAULT_RUN, show_default=True,
              help="Run name: records land in RESULTS/RUN/IMAGE/.")
@click.option("--results", "results_root", type=click.Path(file_okay=False, path_type=Path),
              default="results", show_default=True, help="Results folder.")
@click.option("--backend", type=click.Choice([*backend_names(), AUTO]), default="docker", show_default=True,
              help="How each image's runner starts: docker: one container per image; venv: one virtual "
                   "environment per image, built from its pins; local: this interpreter, no Docker; auto: "
                   "build and use docker, else venvs, else local (`make matrix`; a note says which and why). "
                   "Under --executor ray, what each node runs (docker or local).")
@click.option("--executor", type=click.Choice(EXECUTORS),
              help="Where and when units run: sequential (one runner at a time), slots (one runner per slot at "
                   "once), ray (one task per unit on a Ray cluster, --ray-address) [default: slots on a GPU run, "
                   "else sequential].")
@click.option("--ray-address", metavar="HOST:PORT",
              help="--executor ray: the Ray cluster's head (`ray start --head` prints it) [default: the "
                   "cluster this node belongs to].")
@click.option("--device", type=click.Choice(BY_NAME["device"].choices or ()), default=BY_NAME["device"].default,
              show_default=True, help=BY_NAME["device"].help)
@click.option("--force", is_flag=True, help="Rerun cells that already have a record.")
@click.option("--retry-failed", is_flag=True, help="Rerun cells whose record is not ok.")
@click.option("--cold", is_flag=True, help="No compile cache: every compile starts cold.")
@click.option("--cache-dir", "cache_root", type=click.Path(file_okay=False, path_type=Path),
              help="Compile caches, one folder per image [default: ~/.cache/matrixbench/compile].")
@click.option("--hf-cache", "hf_cache_dir", type=click.Path(file_okay=False, path_type=Path),
              help="HF cache shared by all images [default: $HF_HOME or ~/.cache/huggingface].")
@click.option("--note", help="Why this run is what it is; stored in run.json, shown in the report.")
@click.option("--gpu", help="The GPU(s) to use, by index or UUID, comma-separated (default: "
              "CUDA_VISIBLE_DEVICES, else all). The record names the GPU's UUID.")
@click.option("--allow-busy-gpus", is_flag=True, help="With slots on GPUs: run even when another process "
              "uses a slot's GPU (nvidia-smi --query-compute-apps); its timings are then disturbed.")
@click.option("--aa", "aa_image", metavar="IMAGE",
              help="A/A run: IMAGE twice under two names (IMAGE and IMAGE-aa, one build), interleaved, so the report "
                   "counts how many no-change comparisons were starred on this machine (docs/verdicts.md, Repeats). "
                   "Narrow the cells with --models/--batch-sizes/--modes; the run is aa-IMAGE unless --run names "
                   "another.")
@click.option("--budget", "budget_min", type=FinitePositive(), metavar="MINUTES",
              help="Wall minutes of the run: no process starts that would end past it (estimated from earlier "
                   "records); with --repeats auto, comparisons it leaves undecided say so.")
@click.option("--no-noise-check", "no_noise_check", is_flag=True,
              help=f"A GPU run first spends about {NOISE_CHECK_S:.0f} s measuring the host's noise with a small "
                   "launch-bound model (what change 3 processes a side resolve here, said before the bill, which "
                   "includes it in a dry run; <run>/noise_check.json): skip it.")
@click.option("--dry-run", is_flag=True, help="Print the cells that would run and the estimated duration, and run "
              "nothing.")
@handles_errors
def run(matrix_path, run_name, results_root, backend, executor, ray_address, device, force, retry_failed,
        cold, cache_root, hf_cache_dir, note, gpu, allow_busy_gpus, aa_image, budget_min, no_noise_check, dry_run,
        **options):
    """Run the matrix's cells that have no record yet (HF_TOKEN is passed on, never printed)."""
    matrix = _load(matrix_path, _overrides(options))
    registry, build_options = _builds_of_run(matrix.build, backend, executor, options.get("settings") or {})
    if backend == AUTO and executor == RAY:
        raise click.UsageError("--backend auto: not with --executor ray; give the nodes' --backend (docker or local)")
    if backend in (AUTO, "venv") and executor != RAY and device != "cpu":   # (--device cpu gives no GPU)
        refuse_on_this_host(matrix, list(matrix.images), backend=backend)   # before anything is built here
    if backend == AUTO and not dry_run:
        choice = auto.resolve(matrix, build_options, _echo_build_line)
        _echo_banner(choice.note)
        backend, note, build_options = choice.backend, " ".join(filter(None, [note, choice.note])), None
        if choice.images is not None:
            matrix = _load(matrix_path, _overrides({**options, "images": list(choice.images)}))
    if aa_image is not None:
        matrix = aa_matrix(matrix, aa_image)
        run_name = aa_run_name(aa_image) if run_name == DEFAULT_RUN else run_name
    run_options = RunOptions(
        run_name=run_name, results_root=results_root, backend=backend, device=device, force=force,
        retry_failed=retry_failed, cold=cold, cache_root=cache_root, hf_cache_dir=hf_cache_dir,
        note=note, command=tuple(["matrixbench", *sys.argv[1:]]), gpu=gpu, allow_busy_gpus=allow_busy_gpus,
        executor=executor, ray=RayOptions(address=ray_address, registry=registry), budget_min=budget_min,
        build_options=build_options, noise_check=not no_noise_check,
    )
    if dry_run:
        asked = check_dry_run(matrix, dataclasses.replace(run_options, backend="local") if backend == AUTO
                              else run_options)
        click.echo(describe_plan(matrix, run_dir(results_root, run_name), force, retry_failed, budget_min,
                                 executor=executor, device=device, noise_check=not no_noise_check, gpu=gpu,
                                 at_once=asked))
        return
    summary = run_matrix(matrix, run_options, progress=make_progress())
    click.echo(summary.describe())


_hide(run, RUN_RARE)


def _builds_of_run(build, backend, executor, sets):
    """The build settings (matrix.BuildSettings) this run uses: (registry, images.BuildOptions or None).
    --backend auto builds here, --backend venv builds a venv it finds missing (no base image: that is
    Docker's); --executor ray's docker nodes pull from the registry, else build. A build setting given
    with --set that the run would not use is refused (nothing given is silently ignored)."""
    docker_nodes = executor == RAY and backend == "docker"
    pulls = docker_nodes and bool(build.registry)
    builds = (backend in (AUTO, "venv") and executor != RAY) or (docker_nodes and not pulls)
    options = [name for name in build.image_options() if backend != "venv" or name != "base_image"]
    used = {*(options if builds else ()), *(("registry",) if pulls else ())}
    unused = [name for name in sets if name in BUILD_NAMES and name not in used]
    if unused:
        raise click.UsageError(
            f"--set {', '.join(unused)}: a build setting this run does not use (run builds with --backend auto, "
            "--backend venv (a missing venv; no base_image) and under --executor ray --backend docker, whose "
            "nodes build or pull from `registry`); give it to `matrixbench build`, or drop it")
    return (build.registry if pulls else None), (BuildOptions.of(build) if builds else None)


BUILD_NAMES = tuple(setting.name for setting in BUILD_SETTINGS)


@main.command()
@click.argument("results_dirs", nargs=-1, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default="report",
              show_default=True, help="Where the report goes.")
@click.option("--format", "formats", multiple=True, callback=_comma_list(REPORT_FORMATS), metavar="FORMATS",
              help=f"Output formats, comma-separated, from {', '.join(REPORT_FORMATS)} [default: all].")
@click.option("--price", "prices", multiple=True, metavar="GPU_TYPE=USD",
              help="Your price per GPU-hour in dollars for a GPU type, e.g. A100=1.29 (repeatable); replaces "
                   "matrix.yaml's prices: of that type. Without one the report shows no dollars.")
@click.option("--margin-pct", type=float, callback=_checked_setting("margin_pct"), metavar="PERCENT",
              help="Judge every comparison at this equivalence margin instead of the runs' (run.json's margin_pct, "
                   "else 3): a comparison whose interval lies inside ±PERCENT is \"no change\". The report's notes "
                   "and comparisons.csv's margin_pct say which margin it used.")
@handles_errors
def report(results_dirs, out_dir, formats, prices, margin_pct):
    """Turn records under RESULTS_DIRS (default results/default) into a report."""
    build_report = _library("matrixbench.report", "build_report", "report")
    dirs = list(results_dirs) or [Path("results") / DEFAULT_RUN]
    given = [parse_price_option(text) for text in prices]
    with names_folder("--out", out_dir):
        paths = build_report(dirs, out_dir, formats or list(REPORT_FORMATS), given, margin_pct=margin_pct)
    for path in paths:
        click.echo(str(path))
    for line in unfinished_runs(dirs):
        click.echo(f"warning: {line}", err=True)


@main.command()
@click.option("--images", "remove_images", is_flag=True, help="Also remove the images `build` made.")
@click.option("--venvs", "remove_venvs", is_flag=True,
              help="Remove the venvs `build --backend venv` made (and nothing of Docker's).")
@click.option("--run", "run_id", help="Only the containers of this run.")
@click.option("--dry-run", is_flag=True, help="List what would be removed.")
@handles_errors
def clean(remove_images, remove_venvs, run_id, dry_run):
    """Remove the containers (and with --images the images, with --venvs the venvs) matrixbench left behind."""
    if remove_venvs and (remove_images or run_id):
        raise click.UsageError("--venvs removes venvs only; clean Docker's leftovers in another call")
    if remove_venvs:
        removed = _library("matrixbench.build.venvs", "remove_venvs", "clean")(dry_run=dry_run)
    else:
        removed = _library("matrixbench.build.clean", "clean", "clean")(images=remove_images, run_id=run_id,
                                                                  dry_run=dry_run)
    for line in removed:
        click.echo(("would remove " if dry_run else "removed ") + line)
    if not removed:
        click.echo("nothing to remove")


if __name__ == "__main__":
    main()
