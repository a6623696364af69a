"""Resume only what measures the same thing: a recorded cell is skipped when its record was
measured as this run would measure it, and the run is refused when it was not.

What defines a measurement: the cell (model, its id or config, task, weights, size, batch size,
mode, fullgraph, dtype; a local model's files by their hash, ``model_hash``, not their path; a hub model's
``revision``), the
settings that change the numbers (iterations, warm-up, the accuracy tolerance when one is set), the
device, and the image's content hash (run.json's ``image_hashes``). Resuming a run with other settings
would put two measurements under one name; the error names what differs and offers ``--force`` or a new ``--run`` name.
"""
from collections import Counter

from matrixbench.build.versions import same_release
from matrixbench.errors import ResumeConflictError
from matrixbench.run.results_files import read_record
from runner.records import effective_warmup
from runner.schema import record_path

MEASUREMENT_SETTINGS = ("iterations", "warmup", "accuracy_tolerance")
MAX_SHOWN = 8
# Where a local model's config is, not what it is: the docker backend records its mount
# (/models/<model>/config.json), the local backend the host path.
WHERE_NOT_WHAT = ("config_path",)
# What a record must say to be resumed when this run's cell says it, and must not say when it does not: a local
# model's files' hash (runner.axes model_hash; a record without one, from before the hash existed, cannot show that
# its config and weights are those of today) and a hub model's revision.
ALWAYS_COMPARED = ("model_hash", "revision")


def check_resume(works, matrix, device, previous_manifest, run_path, installed=None):
    """Raise ResumeConflictError when a record this run would skip was measured differently. ``installed``: the
    torch and transformers versions this run's runners import where no image build pins them (the local backend,
    ``Environment.installed_versions``), compared with each skipped record's own."""
    differences = Counter()
    for work in works:
        for record, cell in _skipped(work):
            differences.update(record_differences(record, cell, matrix, device))
            differences.update(_version_differences(record, installed))
        differences.update(_image_change(work, matrix, previous_manifest))
    if differences:
        raise ResumeConflictError(_message(differences, run_path))


def record_differences(record, cell, matrix, device):
    """(what, recorded, asked) for each way ``record`` differs from this run's measurement."""
    cell = cell.to_dict() if hasattr(cell, "to_dict") else cell
    keys = [key for key in cell if key in record["cell"] or key in ALWAYS_COMPARED] + [
        key for key in ALWAYS_COMPARED if key not in cell]
    found = [(_what(key, cell), record["cell"].get(key), cell.get(key)) for key in keys
             if key not in WHERE_NOT_WHAT and record["cell"].get(key) != cell.get(key)]
    settings = record.get("settings") or {}
    for name in MEASUREMENT_SETTINGS:
        asked = getattr(matrix, name)
        if name == "warmup":  # records hold the warm-up the cell really made
            asked = effective_warmup(asked)
        if asked is not None and settings.get(name) != asked:
            found.append((name, settings.get(name), asked))
    if device is not None and record.get("device") != device:   # None: not known (a dry run on --device auto)
        found.append(("device", record.get("device"), device))
    return found


def _what(key, cell):
    if key == "model_hash":
        return (f"model {cell.get('model')}: its files' hash (model_hash: its config, the preprocessor config beside "
                "it and, with pretrained weights, its weights), changed since those records")
    if key == "revision":
        return f"model {cell.get('model')}: its hub revision (revision), asked otherwise than those records'"
    return f"cell {key}"


def _version_differences(record, installed):
    """(what, recorded, installed) for the torch or transformers a record ran that this interpreter no longer
    has (a resume after pip install -U torch under --backend local). Package metadata may lack the build tag
    that ``torch.__version__`` has (PyPI's CUDA wheel: "2.13.0" against "2.13.0+cu130"): then the public
    versions are compared."""
    environment = record.get("environment") or {}
    return [(f"{name} (this interpreter, --backend local)", environment.get(name), version)
            for name, version in (installed or {}).items()
            if environment.get(name) is not None and not _same_build(str(environment[name]), version)]


def _same_build(recorded, installed):
    if recorded == installed:
        return True
    untagged = "+" not in recorded or "+" not in installed
    return untagged and same_release(recorded, installed)


def _skipped(work):
    pending = {repeat.id for repeat in work.pending}
    for repeat in work.all:
        if repeat.id not in pending:
            yield read_record(record_path(work.out_dir, repeat.cell, repeat.index)), repeat.cell


def _image_change(work, matrix, previous_manifest):
    recorded = ((previous_manifest or {}).get("image_hashes") or {}).get(work.image_name)
    asked = matrix.images[work.image_name].content_hash()
    if work.done and recorded is not None and recorded != asked:
        return Counter({(f"image {work.image_name} (content hash)", recorded, asked): work.done})
    return Counter()


def _message(differences, run_path):
    lines = [f"  {what}: recorded {recorded!r}, this run asks {asked!r} ({count} record(s))"
             for (what, recorded, asked), count in sorted(differences.items(), key=str)[:MAX_SHOWN]]
    more = len(differences) - MAX_SHOWN
    lines += [f"  ... and {more} more"] if more > 0 else []
    return (f"{run_path} holds records measured differently from what this run asks; resuming would "
            "report two measurements under one name:\n" + "\n".join(lines) +
            "\nRerun those cells with --force, or give this run another name with --run NAME")
