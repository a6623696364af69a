"""Read result records and merge them into one tidy table: one row per cell.

Records live at ``<results>/<run>/<image>/<cell_id>.json``; every ``*.json`` under a results
folder but ``cells.json`` and ``run.json`` is a record, read once by ``runner.schema``'s reader
and validated against ``runner.schema.RECORD_SCHEMA``; unknown schema versions are refused.
Run manifests are read through ``matrixbench.manifest.read_manifest``, once each.
"""
import json
import re
from pathlib import Path

import jsonschema
import pandas as pd

from matrixbench.errors import ReportError
from matrixbench.layout import CALIBRATION_RUN_DEPTH, CELLS_FILENAME, MANIFEST_FILENAME, SELFTEST_FILENAME
from matrixbench.manifest import read_manifest
from matrixbench.report.overlap import flag_compile_overlaps
from matrixbench.report.published import match_gpu
from runner import axes
from runner.schema import RECORD_SCHEMA, RecordError, read_record

NOT_RECORDS = (CELLS_FILENAME, MANIFEST_FILENAME, SELFTEST_FILENAME)   # selftest.json: the selftest notes read it
# Columns computed here, ahead of the record's own flattened (dotted) keys.
DERIVED_COLUMNS = ("run", "image", "device_name", "published_gpu", "row_key", "mode_label", "repeat", "source")
LIST_COLUMNS = ("timing.samples_ms", "dynamo.break_reasons")
# How results.csv writes the other list fields (timing.flags, placement.cores, ...): items joined.
CSV_LIST_SEPARATOR = ";"
_VALIDATOR = jsonschema.Draft202012Validator(RECORD_SCHEMA)


def schema_fields(schema=RECORD_SCHEMA, prefix=""):
    """(dotted key, JSON Schema) of every leaf field of a flattened record, in schema order."""
    fields = []
    for name, spec in schema["properties"].items():
        if "properties" in spec:
            fields += schema_fields(spec, f"{prefix}{name}.")
        else:
            fields.append((f"{prefix}{name}", spec))
    return fields


def record_columns():
    return [column for column, _ in schema_fields()]


def integer_columns():
    """Columns the schema types as integers: kept as integers (nullable) in the table."""
    return [column for column, spec in schema_fields() if "integer" in _types(spec)]


def _types(spec):
    kind = spec.get("type", [])
    return [kind] if isinstance(kind, str) else kind


COLUMNS = list(DERIVED_COLUMNS) + [column for column in record_columns() if column not in DERIVED_COLUMNS]


def find_record_files(results_dirs):
    """Record files under the given folders (searched recursively), sorted: every ``*.json``
    but the manifests (cells.json, run.json) and the selftest's result (selftest.json). A results folder
    holds nothing else."""
    paths = []
    for folder in map(Path, results_dirs):
        if not folder.is_dir():
            raise ReportError(f"results folder {folder} does not exist; pass a folder written by `matrixbench run`")
        paths += [path for path in folder.rglob("*.json")
                  if path.name not in NOT_RECORDS and not _hidden(path.relative_to(folder))]
    return sorted(set(paths))


def _hidden(relative):
    """Under a hidden folder, e.g. the runner's .scratch (compile caches hold JSON too)."""
    return any(part.startswith(".") for part in relative.parts[:-1])


def load_record(path):
    """One record, parsed once by runner.schema's reader and checked against the schema;
    ReportError names the file and the field."""
    try:
        record = read_record(path)
    except RecordError as exc:
        raise ReportError(f"{exc}; a results folder holds only records, cells.json and run.json") from exc
    error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(record))
    if error is not None:
        field = ".".join(map(str, error.absolute_path)) or "(top level)"
        raise ReportError(f"{path}: field {field}: {error.message}; the record does not match schema "
                          f"v{record['schema_version']}")
    return record


def flatten(record, prefix=""):
    """Nested dicts -> one flat dict with dotted keys; lists stay lists."""
    flat = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def to_row(record, path):
    """A record as one table row: every schema column, plus the derived ones."""
    flat = flatten(record)
    row = {column: flat.get(column) for column in record_columns()}
    row.update(_derived(row, Path(path)), repeat=int(record.get("repeat") or 0))
    return row


def _derived(row, path):
    gpu = row["environment.gpu_name"] if row["device"] == "cuda" else None
    return {
        "run": (path.parents[CALIBRATION_RUN_DEPTH] if row["calibration.phase"] else run_folder_of(path)).name,
        "image": row["environment.image_name"] or path.parent.name,
        "device_name": device_name(row),
        "published_gpu": match_gpu(gpu),
        "row_key": _row_key(row),
        "mode_label": axes.mode_label(cell_fields(row)),
        "source": str(path),
    }


def run_folder_of(path):
    """The run folder a record lies in: the nearest folder above it holding run.json
    (``results/<run>/<image>/`` or, with a GPU-type axis, ``results/<run>/<gpu_type>/<image>/``);
    without one, the folder above the image's."""
    for folder in list(path.parents)[1:3]:
        if (folder / MANIFEST_FILENAME).exists():
            return folder
    return path.parent.parent


def device_name(row):
    """What the cell ran on, as a heading: the GPU's name, or CPU and its model (and, on a cluster, the
    GPU type of its node, so two nodes' CPU records stay apart)."""
    if row["device"] == "cuda":
        return row["environment.gpu_name"] or "CUDA GPU"
    model = row["environment.cpu_model"]
    name = f"CPU ({model})" if model else "CPU"
    gpu_type = row.get("placement.gpu_type")   # a Ray task's node (--backend ray): nodes differ in their CPUs too
    return f"{name} of a {gpu_type} node" if gpu_type else name


def _row_key(row):
    """A table row: the model and the row axes other than batch size (runner.axes.row_key)."""
    return axes.row_key(cell_fields(row))


def cell_fields(row):
    """A table row's cell as {axis: value} (the flattened ``cell.*`` columns; absent axes: None)."""
    return {axis.name: row.get(f"cell.{axis.name}") for axis in axes.AXES}


def merge(rows):
    """Rows -> one DataFrame, one row per (device, image, cell, repeat); the newest record of a
    repeat wins. A cell's repeats (one process each; ``repeat`` 0 when a record has none) stay
    separate rows: cells.CellIndex combines them."""
    frame = pd.DataFrame(rows, columns=COLUMNS).astype({column: "Int64" for column in integer_columns()})
    frame = frame.sort_values(["started_at", "source"], kind="stable")
    frame = frame[~_duplicated(frame)]
    return frame.sort_values(["device_name", "image", "cell_id", "repeat", "calibration.phase", "placement.slot"],
                             kind="stable", na_position="first").reset_index(drop=True)


def _duplicated(frame):
    """Older records of one process: same device, image, cell and repeat (and for a calibration
    record, same phase and slot: matrixbench.executors.calibration runs a cell on every slot)."""
    calibration = frame["calibration.phase"].notna()
    where = frame["calibration.phase"].astype(str) + "/" + frame["placement.slot"].astype(str)
    key = frame[["device_name", "image", "cell_id", "repeat"]].assign(where=where.where(calibration, ""))
    return key.duplicated(keep="last")


def split_calibration(frame):
    """(the matrix's records, the interference calibration's records): calibration records (a
    ``calibration`` block, matrixbench.executors.calibration) are no cell of the matrix's tables."""
    calibration = frame["calibration.phase"].notna()
    return frame[~calibration].reset_index(drop=True), frame[calibration].reset_index(drop=True)


def load_results(results_dirs, unreadable=None):
    """All records under ``results_dirs`` merged into one DataFrame (see COLUMNS).

    Given a list as ``unreadable``, a file that is not a readable record is left out and its
    error appended there (the report lists it); without one it is a ReportError.
    """
    paths = find_record_files(results_dirs)
    if not paths:
        folders = ", ".join(map(str, results_dirs))
        raise ReportError(f"no records under {folders}; run `matrixbench run` first or pass the run's folder")
    rows = []
    for path in paths:
        try:
            rows.append(to_row(load_record(path), path))
        except ReportError as exc:
            if unreadable is None:
                raise
            unreadable.append(str(exc))
    if not rows:
        raise ReportError("no readable records:\n" + "\n".join(unreadable or []))
    return merge(flag_compile_overlaps(rows))


def read_manifests(results_dirs):
    """Every run manifest (run.json) under the folders, each read once, in path order."""
    manifests = []
    for folder in map(Path, results_dirs):
        for path in sorted(folder.rglob(MANIFEST_FILENAME)):
            manifests.append(read_manifest(path.parent))   # a corrupt one: ManifestError, as in run
    return [manifest for manifest in manifests if manifest is not None]


def run_notes(manifests):
    """The "note" of every run manifest, in order, without repeats."""
    notes = []
    for manifest in manifests:
        note = manifest.get("note")
        if note and str(note) not in notes:
            notes.append(str(note))
    return notes


def image_order(manifests):
    """Image names in the order the run manifests list them (matrix order)."""
    order = []
    for manifest in manifests:
        order += [name for name in _manifest_images(manifest) if name not in order]
    return order


def aa_twins(manifests):
    """{twin image: original image} of A/A runs (``run --aa``: one image run twice under two names),
    from each manifest's top-level ``aa_twins``; the later manifest wins a name both give."""
    found = {}
    for manifest in manifests:
        twins = manifest.get("aa_twins") or {}
        if isinstance(twins, dict):
            found.update({str(twin): str(original) for twin, original in twins.items() if twin != original})
    return found


def margin_pct(manifests):
    """The equivalence margin (%) the runs judged at: the first run.json whose matrix sets
    ``margin_pct``; None when none does (the report then uses the setting's default)."""
    for manifest in manifests:
        value = (manifest.get("matrix") or {}).get("margin_pct")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
    return None


def published_overrides(manifests):
    """{image: "main" | "nightly" | "none"} where a run's matrix sets ``published`` for an image."""
    overrides = {}
    for manifest in manifests:
        images = (manifest.get("matrix") or {}).get("images") or {}
        overrides.update({name: entry["published"] for name, entry in images.items()
                          if isinstance(entry, dict) and entry.get("published")})
    return overrides


def _manifest_images(manifest):
    images = manifest.get("images") or []
    names = [image.get("name") if isinstance(image, dict) else image for image in images]
    return [str(name) for name in names if name]


def write_merged(frame, out_dir, image_order=()):
    """The merged table as results.csv and results.jsonl; images in ``image_order`` (matrix
    order), then by name.

    results.csv: one line per record, the COLUMNS but LIST_COLUMNS (those are in results.jsonl);
    line breaks inside fields, as in tracebacks, written as the two characters \\n; other lists
    as ``csv_value`` writes them. results.jsonl: every column, lists as JSON lists.
    """
    out_dir = Path(out_dir)
    csv_path, jsonl_path = out_dir / "results.csv", out_dir / "results.jsonl"
    frame = in_image_order(frame, list(image_order))
    flat = frame.drop(columns=list(LIST_COLUMNS))
    text_columns = [column for column in flat.columns
                    if pd.api.types.is_string_dtype(flat[column]) or flat[column].dtype == object]
    flat[text_columns] = flat[text_columns].map(lambda value: _one_line(csv_value(value)))
    flat.to_csv(csv_path, index=False, lineterminator="\n")
    with open(jsonl_path, "w", encoding="utf-8") as handle:
        for row in frame.to_dict("records"):
            handle.write(json.dumps(_plain(row), sort_keys=True) + "\n")
    return [csv_path, jsonl_path]


def in_image_order(frame, image_order):
    """Rows by device, then image in matrix order (unlisted images after, by name), then cell."""
    rank = {image: index for index, image in enumerate(image_order)}
    key = frame["image"].map(lambda image: (rank.get(image, len(rank)), image))
    order = sorted(range(len(frame)), key=lambda i: (frame["device_name"].iat[i], key.iat[i], frame["cell_id"].iat[i],
                                                     frame["repeat"].iat[i]))
    return frame.iloc[order].reset_index(drop=True)


def csv_value(value):
    """A field as results.csv writes it: a list of scalars joined by CSV_LIST_SEPARATOR
    (``["noisy", "throttled"]`` -> ``noisy;throttled``, ``[]`` -> empty), a list holding objects
    (accuracy.outputs) as compact JSON with sorted keys; anything else as it is."""
    if not isinstance(value, list):
        return value
    if any(isinstance(item, (dict, list)) for item in value):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return CSV_LIST_SEPARATOR.join(str(item) for item in value)


def _one_line(value):
    if isinstance(value, str):
        return value.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\n")
    return value


def _plain(row):
    return {key: plain_value(value) for key, value in row.items()}


def plain_value(value):
    """A table value as plain Python for JSON: NaN/NA -> None, numpy scalars -> int/float/bool."""
    if isinstance(value, (list, str)) or value is None:
        return value
    if pd.isna(value):
        return None
    return value.item() if hasattr(value, "item") else value


def slug(text):
    """A file-name-safe form of a heading."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
