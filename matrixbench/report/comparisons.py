"""Every number the report derives, as rows for comparisons.csv: load it into pandas as is.

One row per comparison, keyed like the tables (device, image, batch size, model, mode) plus
``kind`` and what the cell is compared ``against``. Every comparison of two cells carries its
verdict (report.verdicts: Welch's t on the two sides' log process means, stats.judge):

- ``estimate_ratio`` the judged ratio (a ratio of geometric means of process means), ``ratio_low`` /
  ``ratio_high`` its 95% interval, ``percent`` / ``low_pct`` / ``high_pct`` the same as % ((ratio - 1)
  x 100), ``verdict`` (faster, slower, no change, undecided, not tested), ``baseline_processes`` /
  ``candidate_processes``, ``detectable_pct`` (the true change this comparison would star 80% of the
  time: (t_0.975 + t_0.80) standard errors as a %, stats.POWER; before issue 34 the interval's half-width)
  and ``margin_pct`` (the equivalence margin of "no change").
  Interval columns are empty when a side has one process ("not tested"). ``pairing``: how the two sides
  were judged: "paired by round" (an image change, A/A change or mode change whose two cells ran in one run
  and share 2 or more rounds: stats.judge_by_round on each shared round's log ratio), "paired blocks"
  (``paired_speedup``), "in turns" (an image change whose rounds' two processes took turns, docs/turns.md, in 2 or
  more rounds: stats.judge_sides on each such round's median block log ratio) or "unpaired" (Welch on the two
  sides' process estimates); empty when not tested.
  ``paired_rounds`` (the last column, added with issue 34's shared rounds): for a row paired by round, the
  rounds it was judged on (both sides ran them; ``baseline_processes`` / ``candidate_processes`` are each
  side's processes, so their sum less 2 x ``paired_rounds`` is the rounds only one side ran, left out); for a
  row in turns, the rounds in turns it was judged on; empty for other rows.

Kinds:

- ``cell``: one cell's own statistics across its processes (repeats): candidate_ms = the cell's ms
  (stats.cell_estimate: the geometric mean of its process means; one process: its mean),
  ``processes``, ``process_means`` (";"-separated, in repeat order) and ``between_cv`` (the CV of
  those means; empty with one process).
- ``speedup``: a compiled cell against its image's eager cell; estimate_ratio = eager / compiled (the
  speed-up, its interval inverted from compiled judged against eager), percent = % faster;
  verdict "faster": the compiled cell runs faster than eager.
- ``paired_speedup``: the same speed-up from the compiled cell's paired blocks (issue 32: after its own
  timed loop each compiled process times eager and compiled alternately in short blocks, so both see the
  same host state): estimate_ratio = eager / compiled, each process one draw (the median of its blocks'
  log ratios), Student's t across the processes (stats.judge_paired); ``processes`` = the processes that
  had pairs. Where the host moved between processes, this interval stays narrow while the unpaired
  ``speedup`` row's widens: read the two together (docs/verdicts.md).
- ``image_change``: a cell against the same cell in the previous image (matrix order; A/A twins
  left out); estimate_ratio = candidate / baseline, percent = change (negative is faster).
- ``aa_change``: an A/A twin (``run --aa``: one image run twice under two names) against its
  original; its verdicts measure the false-alarm rate on the machine that ran it.
- ``torch_share``, ``transformers_share``, ``interaction_share``: with attribution, an ``image_change``
  of images that differ in torch and transformers split into each factor's share (report.shares);
  ``against`` names the step and the path ("[2×2]" or "[via <bridge>]"), estimate_ratio/percent the
  share with its Welch interval, ``verdict`` its verdict ("no transformers share (±3%)").
- ``mode_change``: a compiled cell against the same image's default cell, likewise (paired by round on the
  rounds both ran, where they ran in one run).
- ``published_deviation``: a cell against the image's published source on the same GPU;
  estimate_ratio = measured ms / published ms, percent = deviation (no interval: one side is a number).
- ``published_speedup``: on another GPU, a measured speed-up beside one GPU's published one;
  estimate_ratio = measured speed-up with its interval (as the ``speedup`` row's), published_ratio =
  the published speed-up; no verdict (the published side is one number, not processes).
- ``interference``: a cell of the slots' interference calibration (``--calibrate``) run with every
  slot busy against the same cell alone; estimate_ratio = loaded / alone (every slot's every round
  is one process).

The arithmetic is matrixbench.report.arithmetic's, the verdicts report.verdicts': the same
functions the tables use.
"""
import csv
from pathlib import Path

from matrixbench.build.versions import public
from matrixbench.matrix.comparisons import AA_CHANGE, IMAGE_CHANGE, MODE_CHANGE, SPEEDUP
from matrixbench.report import arithmetic, share_tables, stats, verdicts
from matrixbench.report.cells import is_ok, row_label
from matrixbench.report.modes import compiled
from matrixbench.report.published import GPUS, PublishedReference

FILENAME = "comparisons.csv"
PAIRED_SPEEDUP = "paired_speedup"
COLUMNS = ("kind", "device", "image", "torch", "batch_size", "model", "task_model", "mode", "against",
           "baseline_ms", "candidate_ms", "estimate_ratio", "ratio_low", "ratio_high", "percent", "low_pct",
           "high_pct", "verdict", "baseline_processes", "candidate_processes", "detectable_pct", "margin_pct",
           "p_value", "pairing", "processes", "process_means", "between_cv", "accuracy",
           "published_source", "published_gpu", "published_table", "published_ratio", "published_note",
           "paired_rounds")


def comparisons(cells, published, sources):
    """Every derived number, as dicts with COLUMNS, in report order; the comparisons of two cells are
    those of the one list (matrixbench.matrix.comparisons, ``cells.baseline``)."""
    reference = PublishedReference(published)
    rows = []
    for device in cells.values("device"):
        for image in cells.values("image", device=device):
            for row in _in_order(cells, device, image):
                rows += _cell(row) + _speedup(cells, row) + _paired_speedup(row) + _mode_change(cells, row)
                rows += _image_change(cells, row) + _aa_change(cells, row)
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


def _cell(row):
    if not is_ok(row):
        return []
    return [{**_key(row, "cell", ""), "candidate_ms": row["timing.mean_ms"], "processes": row["processes"],
             "process_means": ";".join(repr(float(mean)) for mean in row["process_means"]),
             "between_cv": row["between_cv"]}]


def _speedup(cells, row):
    eager = cells.baseline(row, SPEEDUP)
    if not (is_ok(row) and is_ok(eager)):
        return []
    return [{**_key(row, "speedup", eager["mode_label"]), "baseline_ms": eager["timing.mean_ms"],
             "candidate_ms": row["timing.mean_ms"], **judged(verdicts.judge_speedup(eager, row))}]


def _paired_speedup(row):
    pairs = [blocks for blocks in row.get("process_pairs") or [] if blocks]
    if not (is_ok(row) and pairs):
        return []
    margin = row.get("margin_pct") or verdicts.MARGIN_PCT
    found = stats.judge_paired(pairs, margin_pct=float(margin))
    return [{**_key(row, PAIRED_SPEEDUP, "eager (paired blocks)"), "processes": len(pairs),
             **judged(found)}]


def judged(judgement):
    """A Judgement as comparisons.csv columns (interval ones None when not tested)."""
    def pct(value):
        return None if value is None else arithmetic.percent(value)
    return {"estimate_ratio": judgement.ratio, "ratio_low": judgement.low, "ratio_high": judgement.high,
            "percent": pct(judgement.ratio), "low_pct": pct(judgement.low), "high_pct": pct(judgement.high),
            "verdict": judgement.verdict, "baseline_processes": judgement.baseline_processes,
            "candidate_processes": judgement.candidate_processes, "detectable_pct": judgement.detectable_pct,
            "margin_pct": judgement.margin_pct, "p_value": judgement.p_value,
            "pairing": verdicts.pairing_text(judgement) or None,
            "paired_rounds": judgement.paired_rounds if verdicts.pairing_text(judgement) else None}


def _change(kind, against, baseline, row):
    if not (is_ok(baseline) and is_ok(row)):
        return []
    return [{**_key(row, kind, against), "baseline_ms": baseline["timing.mean_ms"],
             "candidate_ms": row["timing.mean_ms"], **judged(verdicts.judge_cells(baseline, row))}]


def _aa_change(cells, row):
    original = cells.baseline(row, AA_CHANGE)
    return [] if original is None else _change("aa_change", original["image"], original, row)


def _mode_change(cells, row):
    default = cells.baseline(row, MODE_CHANGE)
    return [] if default is None else _change("mode_change", default["mode_label"], default, row)


def _image_change(cells, row):
    baseline = cells.baseline(row, IMAGE_CHANGE)
    if baseline is None:
        return []
    shares = share_tables.comparison_rows(cells, baseline, row, _key)
    return _change("image_change", baseline["image"], baseline, row) + shares


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
            found["estimate_ratio"] = arithmetic.change_ratio(number["latency_ms"], row["timing.mean_ms"])
            found["percent"] = arithmetic.deviation_pct(number["latency_ms"], row["timing.mean_ms"])
    return [found]


def _published_speedup(cells, reference, row, source, gpu):
    batch, model, mode = row["cell.batch_size"], row["cell.model"], row["cell.mode"]
    published = reference.speedup(source, gpu, batch, model, mode)
    eager = cells.speedup_baseline(row)
    if not compiled(mode) or published is None:
        return []
    pair = reference.pair(source, gpu, batch, model, mode)
    found = {**_key(row, "published_speedup", f"published {gpu}"), "published_source": source,
             "published_gpu": gpu, "published_table": pair[1]["table"], "published_ratio": published,
             "published_note": pair[0]["note"] or pair[1]["note"]}
    if is_ok(row) and is_ok(eager):
        speedup = verdicts.judge_speedup(eager, row)
        found.update(baseline_ms=eager["timing.mean_ms"], candidate_ms=row["timing.mean_ms"],
                     estimate_ratio=speedup.ratio, ratio_low=speedup.low, ratio_high=speedup.high)
    return [found]
