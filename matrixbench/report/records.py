"""Read result records and merge them into one tidy table: one row per cell.

Records live at ``<results>/<run>/<image>/<cell_id>.json``; every ``*.json`` under a results
folder but ``cells.json``, ``run.json`` and ``selftest.json`` is a record, read once by
``matrixbench.run.results_files`` (the one reader: regular files, a size cap, the schema, finite numbers
in range); a file it cannot vouch for is left out with a note, a record of a newer schema version
refuses the report. Run manifests are read through ``matrixbench.run.manifest.read_manifest``, once each.

Merging is a union by the identity of a measurement (docs/contract.md): every record counts once,
whichever folder or run name it came from, and two runs of one cell both count.
"""
import hashlib
import json
import os
import re
from pathlib import Path

import pandas as pd

from matrixbench.build.versions import release
from matrixbench.errors import ReportError
from matrixbench.report.overlap import flag_compile_overlaps
from matrixbench.report.published import match_gpu
from matrixbench.run.layout import CALIBRATION_RUN_DEPTH, MANIFEST_FILENAME, NOT_RECORDS
from matrixbench.run.manifest import read_manifest
from matrixbench.run.results_files import NewerUnvouched, Unvouched, read_record_as_written
from matrixbench.run.resume import MEASUREMENT_SETTINGS
from runner import axes
from runner.schema import RECORD_SCHEMA

# Columns computed here, ahead of the record's own flattened (dotted) keys. ``machine``, ``process`` and
# ``record_hash`` are a measurement's identity (docs/contract.md), ``run_id`` its run's (rounds pair by it);
# ``settings_label`` tells apart rows of one cell whose processes measured with other settings or versions.
DERIVED_COLUMNS = ("run", "image", "device_name", "published_gpu", "row_key", "mode_label", "repeat", "source",
                   "run_id", "machine", "process", "record_hash", "settings_label")
# What a process ran under besides its settings (environment.*): processes that differ in one are not pooled.
VERSIONS = ("torch", "transformers")
# What a cell's model is (cell.*), beyond its name: processes of one cell id that differ in one measured another model
# (a local config or checkpoint edited between runs, another hub id under the same name) and are not pooled.
MODEL_FIELDS = ("model_id", "revision", "model_hash", "task", "weights")   # the cell's; with the record's model_commit
LIST_COLUMNS = ("timing.samples_ms", "dynamo.break_reasons")
# How results.csv writes the other list fields (timing.flags, placement.cores, ...): items joined.
CSV_LIST_SEPARATOR = ";"


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


def results_root(path, results_dirs):
    """The given results folder ``path`` was found under (a link must stay inside it)."""
    for folder in map(Path, results_dirs):
        if folder == path or folder in path.parents:
            return folder
    return None


def _hidden(relative):
    """Under a hidden folder, e.g. the runner's .scratch (compile caches hold JSON too)."""
    return any(part.startswith(".") for part in relative.parts[:-1])


def load_record(path, root=None):
    """One record, read once by matrixbench.run.results_files (file, JSON, schema, limits), as the current
    schema version, and the version its file was written in; ReportError names the file and the field."""
    try:
        return read_record_as_written(path, root)
    except NewerUnvouched as exc:
        raise ReportError(f"{exc.line()}; the report is refused") from None
    except Unvouched as exc:
        raise ReportError(f"{exc.line()}; a results folder holds only records, cells.json, run.json and "
                          "selftest.json") from None


def flatten(record, prefix=""):
    """Nested dicts -> one flat dict with dotted keys; lists stay lists."""
    flat = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


# The axes a cell's JSON leaves out at their default (runner.axes, omit_default) that have a value to show there.
_OMITTED_AT_DEFAULT = tuple(axis for axis in axes.AXES if axis.omit_default and axis.default is not None)


def to_row(record, path, run_ids=None, written_version=None):
    """A record as one table row: every schema column, plus the derived ones. ``run_ids``: {run
    folder: its run's identity} (``run_identity``); ``written_version``: the schema version of the file (a
    converted record's ``schema_version`` is the current one), which the row's ``schema_version`` then gives."""
    flat = flatten(record)
    if written_version is not None:
        flat["schema_version"] = written_version
    for axis in _OMITTED_AT_DEFAULT:   # a cell leaves such an axis out at its default (tf32: off): say the value
        if flat.get(f"cell.{axis.name}") is None:
            flat[f"cell.{axis.name}"] = axis.default
    row = {column: flat.get(column) for column in record_columns()}
    row.update(_derived(row, Path(path)), repeat=int(record.get("repeat") or 0))
    row.update(identity_columns(row, Path(path), run_ids or {}), record_hash=record_hash(record))
    return row


def record_hash(record):
    """The record's content, hashed (sha256 of its JSON with sorted keys, 16 hex digits): a copy of a record has
    the same hash whatever folder it lies in; two processes' records never do."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def run_identity(folder, manifest):
    """A run's identity: its name and when its first invocation started (run.json; a resume keeps
    it, another machine's run of the same name has its own); the name alone without run.json."""
    name = Path(folder).name
    if not manifest:
        return name
    history = manifest.get("history") or []
    started = (history[0].get("started_at") if history else None) or manifest.get("started_at")
    return f"{name}@{started}" if started else name


def identity_columns(row, path, run_ids):
    """The measurement's identity (docs/contract.md): the run (``run_identity``), the machine (host
    name and GPU) and the process (cell, repeat, where it ran, when it started and for how long)."""
    folder = _run_folder(row, path)
    gpu = row.get("environment.gpu_uuid") or row.get("placement.gpu_uuid")
    machine = "/".join(str(part) for part in (row.get("environment.hostname") or "unknown host", gpu) if part)
    where = [row["calibration.phase"], row.get("placement.slot")] if row["calibration.phase"] else []
    process = "#".join(str(part) for part in [row["cell_id"], f"r{row['repeat']}", *where, row["started_at"],
                                              row["duration_s"]])
    return {"run_id": run_ids.get(str(folder), folder.name), "machine": machine, "process": process,
            "settings_label": None}


def _run_folder(row, path):
    return path.parents[CALIBRATION_RUN_DEPTH] if row["calibration.phase"] else run_folder_of(path)


def _derived(row, path):
    gpu = row["environment.gpu_name"] if row["device"] == "cuda" else None
    return {
        "run": _run_folder(row, path).name,
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


# A measurement's identity: no part of it comes from run.json or a folder's name, so a copy of a run folder
# (with or without its run.json, under any name) is the same measurement.
IDENTITY = ("machine", "image", "process", "record_hash")


def merge(rows, notes=None):
    """Rows -> one DataFrame: the union of the measurements by their identity (IDENTITY,
    docs/contract.md). A measurement reached twice (the same file through two folders, a copy) counts
    once; the processes of one cell all count (one run's or several): as processes of that cell when their
    measurement settings and versions agree, else as rows of their own (``settings_label`` says which).
    ``notes``: a list the report's notes on each of these go to."""
    notes = [] if notes is None else notes
    rows = _unique(rows, notes)
    _apart(rows, notes)
    frame = pd.DataFrame(rows, columns=COLUMNS).astype({column: "Int64" for column in integer_columns()})
    return frame.sort_values(["device_name", "image", "cell_id", "repeat", "calibration.phase", "placement.slot",
                              "started_at", "source"], kind="stable", na_position="first").reset_index(drop=True)


def _unique(rows, notes):
    """Each measurement once: of copies, the one whose run has a run.json (its run identity is more than the
    folder's name), then the first by path."""
    seen = {}
    twice = []
    for row in sorted(rows, key=lambda row: (row["run_id"] == row["run"], row["source"])):
        key = tuple(str(row[column]) for column in IDENTITY)
        if key in seen:
            twice.append((seen[key]["source"], row["source"]))
            continue
        seen[key] = row
    for first, again in twice[:20]:
        notes.append(f"The same measurement reached twice: {again} is {first} (same machine, process and record, "
                     "whatever the folder or run name); counted once.")
    if len(twice) > 20:
        notes.append(f"... and {len(twice) - 20} more measurements reached twice, each counted once.")
    return list(seen.values())


def settings_of(row):
    """What a process measured with, as far as comparing it with another's goes."""
    return tuple((name, row.get(f"settings.{name}")) for name in MEASUREMENT_SETTINGS)


def versions_of(row):
    """The VERSIONS a process ran under ("unknown" where the record does not say)."""
    return tuple(_version(row, name) for name in VERSIONS)


def _apart(rows, notes):
    """A cell's processes pool only when their measurement settings and versions agree, within one run and
    across runs: else each kind is a row of its own (row_key and settings_label name its settings and the
    versions that differ). A note per set of runs: that their processes count together, or which cells and
    versions were kept apart."""
    cells = {}
    for row in rows:
        where = (row["device_name"], row["image"], row["cell_id"], row["calibration.phase"], row.get("placement.slot")
                 if row["calibration.phase"] else None)
        cells.setdefault(where, []).append(row)
    together, apart = {}, {}
    for group in cells.values():
        runs = tuple(sorted({row["run_id"] for row in group}))
        differ = _differing(group)
        if not differ and len(runs) > 1:
            together.setdefault(runs, []).append(group[0]["cell_id"])
        if differ:
            _keep_apart(group, differ, apart.setdefault(runs, {}))
    for runs, cell_ids in together.items():
        notes.append(f"Runs {_names(runs)} measured the same {_cells(cell_ids)} with the same settings: their "
                     "processes count together.")
    for runs, found in apart.items():
        notes += [_apart_note(runs, what, cell_ids, values) for what, (cell_ids, values) in found.items()]


def _keep_apart(group, differ, found):
    """Label the group's rows by what they differ in (``_differing``); ``found``: {"settings" | "versions":
    (cell ids, {version name: its values})}, for the notes."""
    cell_id = group[0]["cell_id"]
    for kind in ("model", "settings"):
        if kind in differ:
            found.setdefault(kind, ([], {}))[0].append(cell_id)
    versions = [name for name in differ if name in VERSIONS]
    if versions:
        cell_ids, values = found.setdefault("versions", ([], {}))
        cell_ids.append(cell_id)
        for name in versions:
            values.setdefault(name, set()).update(_version(row, name) for row in group)
    for row in group:
        row["settings_label"] = _label(row, differ)
        row["row_key"] = f"{row['row_key']} [{row['settings_label']}]"


def _differing(group):
    """What the group's processes disagree on: "model" (one or more MODEL_FIELDS), "settings" (one or more
    MEASUREMENT_SETTINGS) and each of VERSIONS that differs, in that order."""
    differ = [name for name in VERSIONS if len({_version(row, name) for row in group}) > 1]
    model = ["model"] if len({model_of(row) for row in group}) > 1 else []
    return model + (["settings"] if len({settings_of(row) for row in group}) > 1 else []) + differ


def model_of(row):
    """What model a process measured, beyond the cell's name (MODEL_FIELDS; "unknown" where a record does not say)."""
    return tuple((name, _cell_value(row, name)) for name in MODEL_FIELDS) + (("model_commit", row.get("model_commit")),)


def _cell_value(row, name):
    value = row.get(f"cell.{name}")
    return "unknown" if value is None and name == "model_hash" and row.get("cell.config_path") else value


def _version(row, name):
    value = row.get(f"environment.{name}")
    return "unknown" if value is None else str(value)


def _label(row, differ):
    """A kept-apart row's label: its settings (where settings differ), then each version that differs."""
    models = _model_parts(row) if "model" in differ else []
    parts = [f"{name} {value}" for name, value in settings_of(row)] if "settings" in differ else []
    return ", ".join(models + parts + [f"{name} {_version(row, name)}" for name in differ if name in VERSIONS])


def _model_parts(row):
    """A kept-apart row's model: its hub id (at its revision, from its commit), or its local files' hash, and its
    weights."""
    found = dict(model_of(row))
    return [f"model {found['model_hash'] or hub_source(found) or 'shipped'}", f"{found['weights']} weights"]


def hub_source(found):
    """A hub model as a record says it: "org/name@revision commit 0123456789ab" (the parts it has), else None."""
    if not found.get("model_id"):
        return None
    revision = f"@{found['revision']}" if found.get("revision") else ""
    commit = f" commit {found['model_commit'][:12]}" if found.get("model_commit") else ""
    return f"{found['model_id']}{revision}{commit}"


def _apart_note(runs, what, cell_ids, values):
    who = f"Runs {_names(runs)}" if len(runs) > 1 else f"Processes of run {runs[0]}"
    if what == "model":
        return (f"{who} measured the same {_cells(cell_ids)} of another model under one name (its hub id, revision "
                "or commit, its local config or weights by their hash, its task or weights differ): each model's "
                "processes are a row of their own, labelled with it.")
    if what == "settings":
        return (f"{who} measured the same {_cells(cell_ids)} with other settings ({', '.join(MEASUREMENT_SETTINGS)}): "
                "each settings' processes are a row of their own.")
    versions = "; ".join(f"{name} {', '.join(sorted(values[name], key=lambda v: (release(v), v)))}"
                         for name in VERSIONS if name in values)
    return (f"{who} measured the same {_cells(cell_ids)} under other versions ({versions}): each version's processes "
            "are a row of their own, labelled with it; the Environment table lists every version.")


def _names(runs):
    return ", ".join(runs[:-1]) + " and " + runs[-1]


def _cells(cell_ids):
    unique = sorted(set(cell_ids))
    shown = ", ".join(unique[:5]) + (f" and {len(unique) - 5} more" if len(unique) > 5 else "")
    return f"{len(unique)} cell(s) ({shown})"


def split_calibration(frame):
    """(the matrix's records, the interference calibration's records): calibration records (a
    ``calibration`` block, matrixbench.executors.calibration) are no cell of the matrix's tables."""
    calibration = frame["calibration.phase"].notna()
    return frame[~calibration].reset_index(drop=True), frame[calibration].reset_index(drop=True)


def load_results(results_dirs, unreadable=None, notes=None, manifests=None):
    """All records under ``results_dirs`` merged into one DataFrame (see COLUMNS, ``merge``).

    Given a list as ``unreadable``, a file that is not a readable record is left out and its
    error appended there (the report lists it); without one it is a ReportError. A record of a
    newer schema version is a ReportError either way (docs/reliability.md). ``notes``: where merge's
    notes go; ``manifests``: {run folder: run.json} (``manifests_by_folder``), for the runs' identities.
    """
    paths = _unique_files(find_record_files(results_dirs), notes if notes is not None else [])
    if not paths:
        folders = ", ".join(map(str, results_dirs))
        raise ReportError(f"no records under {folders}; run `matrixbench run` first or pass the run's folder")
    run_ids = {folder: run_identity(folder, manifest) for folder, manifest in (manifests or {}).items()}
    rows = []
    for path in paths:
        try:
            record, written = load_record(path, results_root(path, results_dirs))
            rows.append(to_row(record, path, run_ids, written))
        except ReportError as exc:
            if unreadable is None or "the report is refused" in str(exc):
                raise
            unreadable.append(str(exc))
    if not rows:
        raise ReportError("no readable records:\n" + "\n".join(unreadable or []))
    return merge(flag_compile_overlaps(rows), notes)


def _unique_files(paths, notes):
    """One path per file (two results folders that overlap, or a link, reach one file twice)."""
    seen, kept = {}, []
    for path in paths:
        try:
            info = os.stat(path)
            key = (info.st_dev, info.st_ino)
        except OSError:
            key = (None, str(path))
        if key in seen:
            notes.append(f"{path}: the same file as {seen[key]}; read once")
            continue
        seen[key] = path
        kept.append(path)
    return kept


def read_manifests(results_dirs):
    """Every run manifest (run.json) under the folders, each read once, in path order."""
    return list(manifests_by_folder(results_dirs).values())


def manifests_by_folder(results_dirs):
    """{run folder (str): its run.json}, each file read once, in path order; a corrupt one is a
    ManifestError (exit 8), as in run."""
    found = {}
    for folder in map(Path, results_dirs):
        for path in sorted(folder.rglob(MANIFEST_FILENAME)):
            if _hidden(path.relative_to(folder)) or str(path.parent) in found:
                continue
            manifest = read_manifest(path.parent)
            if manifest is not None:
                found[str(path.parent)] = manifest
    return found


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
