"""Every number the report derives, as rows for comparisons.csv: load it into pandas as is.

One row per comparison, keyed like the tables (device, image, batch size, model, mode) plus
``kind`` and what the cell is compared ``against``:

- ``cell``: one cell's own statistics across its processes (repeats): candidate_ms = the mean over
  all samples of all processes, ``processes``, ``process_means`` (";"-separated, in repeat order)
  and ``between_cv`` (the CV of those means; empty with one process).
- ``speedup``: a compiled cell against its image's eager cell; ratio = eager ms / compiled ms,
  percent = % faster (ratio - 1).
- ``image_change``: a cell against the same cell in the previous image (matrix order);
  ratio = candidate ms / baseline ms, percent = change (negative is faster), with the
  hierarchical bootstrap interval and its significance ("not tested: one process per cell"
  when a side has one process; ``processes`` is the fewer of the two).
- ``torch_share``, ``transformers_share``, ``interaction_share``: with attribution, an ``image_change``
  of images that differ in torch and transformers split into each factor's share (report.shares);
  ``against`` names the step and the path ("[2×2]" or "[via <bridge>]"), ratio/percent the share with
  its Welch interval, ``significant`` its verdict ("no transformers share (±2%)").
- ``mode_change``: a compiled cell against the same image's default cell, likewise.
- ``published_deviation``: a cell against the image's published source on the same GPU;
  ratio = measured ms / published ms, percent = deviation.
- ``published_speedup``: on another GPU, a measured speed-up beside one GPU's published one;
  ratio = measured speed-up, published_ratio = published speed-up.
- ``interference``: a cell of the slots' interference calibration (``--calibrate``) run with every
  slot busy against the same cell alone; ratio = loaded ms / alone ms, percent = change, with the
  hierarchical interval (every slot's every round is one process).

The arithmetic is matrixbench.report.arithmetic's, the intervals stats.compare_processes': the same
functions the tables use.
"""
import csv
from pathlib import Path

from matrixbench.report import arithmetic, share_tables, stats
from matrixbench.report.cells import is_ok, row_label
from matrixbench.report.published import GPUS, PublishedReference
from matrixbench.versions import public

FILENAME = "comparisons.csv"
COLUMNS = ("kind", "device", "image", "torch", "batch_size", "model", "task_model", "mode", "against",
           "baseline_ms", "candidate_ms", "ratio", "percent", "low_pct", "high_pct", "significant",
           "processes", "process_means", "between_cv", "accuracy",
           "published_source", "published_gpu", "published_table", "published_ratio", "published_note")


def comparisons(cells, published, sources):
    """Every derived number, as dicts with COLUMNS, in report order."""
    reference = PublishedReference(published)
    rows = []
    for device in cells.values("device"):
        compared = [image for image in cells.values("image", device=device) if image not in cells.bridges]
        for image in cells.values("image", device=device):
            index = compared.index(image) if image in compared else 0
            for row in _in_order(cells, device, image):
                rows += _cell(row) + _speedup(cells, row) + _mode_change(cells, row)
                rows += _image_change(cells, row, compared[index - 1] if index else None)
                rows += _published(cells, reference, row, sources[image])
    return rows


def calibration_comparisons(pairs):
    """The ``interference`` rows of (alone, loaded) pairs (report.calibration.phase_pairs)."""
    return [found for alone, loaded in pairs for found in _change("interference", "alone", alone, loaded)]


def write_comparisons(rows, out_dir):
    path = Path(out_dir) / FILENAME
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows({key: _text(row.get(key)) for key in COLUMNS} for row in rows)
    return path


def _text(value):
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def _in_order(cells, device, image):
    return [row for row_key in cells.values("row", device=device, image=image)
            for batch in cells.values("batch", device=device, image=image, row=row_key)
            for mode in cells.values("mode", device=device, image=image, row=row_key, batch=batch)
            if (row := cells.get(device, image, batch, row_key, mode)) is not None]


def _key(row, kind, against):
    return {"kind": kind, "device": row["device_name"], "image": row["image"],
            "torch": public(row["environment.torch"]), "batch_size": row["cell.batch_size"],
            "model": row["row_key"], "task_model": row_label(row), "mode": row["mode_label"], "against": against,
            "accuracy": row["accuracy.status"]}


def _sibling(cells, row, image=None, mode=None):
    return cells.get(row["device_name"], image or row["image"], row["cell.batch_size"], row["row_key"],
                     mode or row["mode_label"])


def _cell(row):
    if not is_ok(row):
        return []
    return [{**_key(row, "cell", ""), "candidate_ms": row["timing.mean_ms"], "processes": row["processes"],
             "process_means": ";".join(repr(float(mean)) for mean in row["process_means"]),
             "between_cv": row["between_cv"]}]


def _speedup(cells, row):
    eager = _sibling(cells, row, mode="eager")
    if row["cell.mode"] == "eager" or not (is_ok(row) and is_ok(eager)):
        return []
    value = arithmetic.speedup(eager["timing.mean_ms"], row["timing.mean_ms"])
    return [{**_key(row, "speedup", "eager"), "baseline_ms": eager["timing.mean_ms"],
             "candidate_ms": row["timing.mean_ms"], "ratio": value, "percent": arithmetic.percent(value)}]


def _change(kind, against, baseline, row):
    if not (is_ok(baseline) and is_ok(row)):
        return []
    change = stats.compare_processes(baseline["process_samples"], row["process_samples"])
    return [{**_key(row, kind, against), "baseline_ms": baseline["timing.mean_ms"],
             "candidate_ms": row["timing.mean_ms"],
             "ratio": arithmetic.change_ratio(baseline["timing.mean_ms"], row["timing.mean_ms"]),
             "percent": change.change_pct, "low_pct": change.low_pct, "high_pct": change.high_pct,
             "significant": stats.NOT_TESTED if change.significant is None else change.significant,
             "processes": change.processes}]


def _mode_change(cells, row):
    if row["cell.mode"] in ("eager", "default"):
        return []
    return _change("mode_change", "default", _sibling(cells, row, mode="default"), row)


def _image_change(cells, row, previous):
    if previous is None:
        return []
    baseline = _sibling(cells, row, image=previous)
    shares = share_tables.comparison_rows(cells, baseline, row, _key) if baseline is not None else []
    return _change("image_change", previous, baseline, row) + shares


def _published(cells, reference, row, source):
    if not reference.comparable(row, source):
        return []
    if row["published_gpu"]:
        return _deviation(reference, row, source)
    return [found for gpu in GPUS for found in _published_speedup(cells, reference, row, source, gpu)]


def _deviation(reference, row, source):
    gpu = row["published_gpu"]
    number = reference.number(source, gpu, row["cell.batch_size"], row["cell.model"], row["cell.mode"])
    if number is None:
        return []
    found = {**_key(row, "published_deviation", f"published {gpu}"), "published_source": source,
             "published_gpu": gpu, "published_table": number["table"], "published_note": number["note"],
             "candidate_ms": row["timing.mean_ms"] if is_ok(row) else None}
    if number["status"] == "ok":
        found["baseline_ms"] = number["latency_ms"]
        if is_ok(row):
            found["ratio"] = arithmetic.change_ratio(number["latency_ms"], row["timing.mean_ms"])
            found["percent"] = arithmetic.deviation_pct(number["latency_ms"], row["timing.mean_ms"])
    return [found]


def _published_speedup(cells, reference, row, source, gpu):
    batch, model, mode = row["cell.batch_size"], row["cell.model"], row["cell.mode"]
    published = reference.speedup(source, gpu, batch, model, mode)
    eager = _sibling(cells, row, mode="eager")
    if mode == "eager" or published is None:
        return []
    pair = reference.pair(source, gpu, batch, model, mode)
    found = {**_key(row, "published_speedup", f"published {gpu}"), "published_source": source,
             "published_gpu": gpu, "published_table": pair[1]["table"], "published_ratio": published,
             "published_note": pair[0]["note"] or pair[1]["note"]}
    if is_ok(row) and is_ok(eager):
        found.update(baseline_ms=eager["timing.mean_ms"], candidate_ms=row["timing.mean_ms"],
                     ratio=arithmetic.speedup(eager["timing.mean_ms"], row["timing.mean_ms"]))
    return [found]
