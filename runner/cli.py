"""``python -m runner``: parse the command line, build a cells_file, run it.

One pending-cells rule: the host decides which cells run (matrixbench.run.pending, with
runner.schema.needs_run) and the runner runs every cell of a ``--cells`` file; only the
shorthand, where no host decided, skips recorded cells by the same ``needs_run``.

Two ways to say what to run:
- ``--cells FILE``: the cells JSON the host writes (see runner.cells_file), settings included;
- shorthand for people: ``--models vit,resnet --modes eager,default --batch-sizes 1,8 ...``,
  every combination of the lists, with settings from the flags.

Exit codes: 0 when the cells ran, whatever their statuses (a failed cell is a status in
its record); 1 when a record cannot be written (a full disk: the line says which file); 2 for bad
usage (argparse's code) and for a record of a newer schema version it must not overwrite.
"""
import argparse
import signal
import sys

from runner import axes
from runner.cells_file import CellsFile, CellsFileError, load_cells_file, validate_cell, validate_settings
from runner.core import ATTENTION, DTYPES, MODES, SIZES, TASKS, WEIGHTS
from runner.driver import run_cells_file
from runner.schema import NewerRecordError
from runner.settings import BY_NAME, RUNNER_SETTINGS

SETTING_FLAGS = tuple(setting.name for setting in RUNNER_SETTINGS)
SHORTHAND_DEFAULTS = {name: list(BY_NAME[name].default) if BY_NAME[name].many else BY_NAME[name].default
                      for name in ("modes", "batch_sizes", "dtypes", "size", "weights")}
RESUME_FLAGS = ("force", "retry_failed")   # the shorthand's own resume: the host decides for --cells
SHORTHAND_FLAGS = ("models", "modes", "batch_sizes", "dtypes", "size", "weights", "fullgraph", "attention",
                   "model_id", "config_path", "task", "image_name", "image_id",
                   *(axis.name for axis in axes.setting_axes()))


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m runner",
        description="Benchmark Hugging Face vision models under torch.compile: one JSON record "
                    "per cell into --out. Give --cells FILE, or --models with the shorthand flags.")
    parser.add_argument("--out", required=True, help="folder for the records (<cell_id>.json)")
    parser.add_argument("--cells", help="cells JSON file: {settings, image_name, image_id, cells}")
    parser.add_argument("--force", action="store_true",
                        help="shorthand: rerun cells that already have a record (a --cells file is run whole: "
                             "the host chose its cells)")
    parser.add_argument("--retry-failed", action="store_true",
                        help="shorthand: rerun cells whose record has a failed status (oom, error, timeout, crashed)")
    parser.add_argument("--check", action="store_true",
                        help="run nothing: build each model on the meta device, write <out>/check.json")
    parser.add_argument("--noise-probe", type=float, metavar="SECONDS",
                        help="run no cell: measure this host's noise with a small launch-bound model for SECONDS "
                             "on the settings' device, write <out>/noise_probe.json (runner.noise_probe)")
    _add_shorthand(parser.add_argument_group("shorthand (instead of --cells)"))
    _add_settings(parser.add_argument_group("settings (with the shorthand)"))
    return parser


def _add_shorthand(group):
    group.add_argument("--models", type=_names, help="comma-separated model short names (e.g. vit,resnet), "
                       "or 'default' for the default matrix's models")
    group.add_argument("--modes", type=_choices(MODES),
                       help=f"comma-separated, from {', '.join(MODES)} (default: eager,default)")
    group.add_argument("--batch-sizes", type=_positive_ints, help="comma-separated (default: 1)")
    group.add_argument("--dtypes", type=_choices(DTYPES),
                       help=f"comma-separated, from {', '.join(DTYPES)} (default: float32)")
    group.add_argument("--size", choices=SIZES, help="full or tiny (toy dimensions, for tests)")
    group.add_argument("--weights", choices=WEIGHTS, help="random (default) or pretrained")
    group.add_argument("--fullgraph", action="store_true", help="torch.compile(fullgraph=True)")
    group.add_argument("--attention", choices=ATTENTION, help=BY_NAME["attention"].help)
    group.add_argument("--model-id", help="hub id, for a model that is not shipped (needs --task)")
    group.add_argument("--config-path", help="local config.json, for a model that is not shipped (needs --task)")
    group.add_argument("--task", choices=TASKS, help="the task of a model given by --model-id or --config-path")
    for axis in axes.setting_axes():   # the axes that declare their setting (runner.axes)
        if axis.kind == "boolean":
            group.add_argument(_flag(axis.name), action="store_true", default=None, help=axis.setting_help)
        else:
            group.add_argument(_flag(axis.name), choices=axis.choices, help=axis.setting_help)
    group.add_argument("--image-name", help="image name to record in the environment")
    group.add_argument("--image-id", help="image id to record in the environment")


def _add_settings(group):
    """One flag per runner setting, from its declaration (runner.settings)."""
    types = {"integer": int, "number": float, "string": str}
    for setting in RUNNER_SETTINGS:
        if setting.kind == "boolean":   # on by default: --no-<name> turns it off
            group.add_argument("--no-" + setting.name.replace("_", "-"), dest=setting.name, action="store_false",
                               default=None, help=setting.help)
            continue
        if setting.auto:
            group.add_argument(_flag(setting.name), type=_auto_or(types[setting.kind]),
                               help=f"{setting.help} (default: {setting.default})")
            continue
        default = "by dtype" if setting.default is None else setting.default
        group.add_argument(_flag(setting.name), type=types[setting.kind], choices=setting.choices,
                           help=f"{setting.help} (default: {default})")


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cells_file = cells_file_from_args(args)
    except CellsFileError as exc:
        parser.error(str(exc))
    if args.check:
        from runner.check import write_check  # imports torch: only when asked

        write_check(cells_file, args.out)
        return 0
    if args.noise_probe is not None:
        import os

        from runner.noise_probe import PROBE_FILENAME, write_probe

        write_probe(os.path.join(args.out, PROBE_FILENAME), cells_file.settings.get("device", "auto"),
                    args.noise_probe)
        return 0
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        run_cells_file(cells_file, args.out, force=args.force or bool(args.cells), retry_failed=args.retry_failed)
    except KeyboardInterrupt:
        print("runner: interrupted; the running cell was stopped, finished records are kept", file=sys.stderr)
        return 130
    except NewerRecordError as exc:
        print(f"runner: refused: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:   # a full disk, a read-only folder: one line, the host shows it
        print(f"runner: cannot write {exc.filename or args.out}: {exc.strerror or exc}; finished records are "
              "kept, the cells without a record run again on the next run", file=sys.stderr)
        return 1
    return 0


def _interrupt(signum, frame):
    """SIGTERM (docker stop, the host's Ctrl-C) unwinds like Ctrl-C, so the running cell's
    process group is killed on the way out (runner.isolation kills it in a finally)."""
    raise KeyboardInterrupt


def cells_file_from_args(args):
    given = [name for name in SHORTHAND_FLAGS + SETTING_FLAGS + RESUME_FLAGS
             if getattr(args, name) not in (None, False)]
    if args.cells:
        if given:
            raise CellsFileError(f"--cells: the file holds the cells and settings; drop "
                            f"{', '.join(_flag(name) for name in given) or '--models'}")
        return load_cells_file(args.cells)
    if not args.models:
        raise CellsFileError("say what to run: --cells FILE, or --models NAMES (with --modes, --batch-sizes, ...)")
    settings = {name: getattr(args, name) for name in SETTING_FLAGS if getattr(args, name) is not None}
    cells = [validate_cell(cell, f"--models {cell['model']}") for cell in shorthand_cells(args)]
    return CellsFile(settings=validate_settings(settings, "flags"), cells=cells,
                image_name=args.image_name, image_id=args.image_id)


def shorthand_cells(args):
    """Every combination of the shorthand's lists, as cells (runner.axes.cross_product)."""
    given = {name: getattr(args, name) for name in SHORTHAND_DEFAULTS if getattr(args, name) is not None}
    lists = dict(SHORTHAND_DEFAULTS, **given)
    values = dict(lists, fullgraph=args.fullgraph, attention=args.attention or BY_NAME["attention"].default,
                  **{axis.source: _axis_flag(args, axis) for axis in axes.setting_axes()})
    models = [dict(_model_fields(name, args), weights=lists["weights"]) for name in expand_models(args.models)]
    return [cell.to_dict() for cell in axes.cross_product(models, values)]


def _axis_flag(args, axis):
    value = getattr(args, axis.name)
    return axis.default if value is None else value


def expand_models(names):
    if names == ["default"]:
        return list(_seed_models()[1])
    return names


def _model_fields(name, args):
    """model, model_id, config_path and task: from the shipped registry, or from the flags."""
    if args.model_id or args.config_path:
        if not args.task:
            raise CellsFileError("--model-id / --config-path: add --task (one of " + ", ".join(TASKS) + ")")
        return {"model": name, "model_id": args.model_id, "config_path": args.config_path, "task": args.task}
    seed_models = _seed_models()[0]
    if name not in seed_models:
        raise CellsFileError(f"--models: {name!r} is not a shipped model; valid: {', '.join(sorted(seed_models))}. "
                        "For another model give --model-id or --config-path, and --task")
    spec = seed_models[name]
    return {"model": name, "model_id": spec.model_id, "config_path": None, "task": spec.task}


def _seed_models():
    from runner.models import DEFAULT_MODELS, SEED_MODELS  # imports torch: only for the shorthand

    return SEED_MODELS, DEFAULT_MODELS


def _flag(name):
    return "--" + name.replace("_", "-")


def _auto_or(convert):
    def parse(text):
        return "auto" if text == "auto" else convert(text)
    return parse


def _names(text):
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected comma-separated names")
    return names


def _choices(valid):
    def parse(text):
        names = _names(text)
        bad = [name for name in names if name not in valid]
        if bad:
            raise argparse.ArgumentTypeError(f"{', '.join(bad)} not in {', '.join(valid)}")
        return names
    return parse


def _positive_ints(text):
    try:
        values = [int(part) for part in _names(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"batch sizes must be >= 1, got {text!r}")
    return values
