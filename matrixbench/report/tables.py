"""Table data for the report: what each table shows, as text cells the templates lay out.

Every cell has text: a latency, a change, a status (OOM, ERR, TIMEOUT, CRASH, with a
footnote giving the reason) or a dash with a meaning given in the legend; never empty, never
a made-up 0. Columns with nothing to show are dropped.
"""
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from matrixbench.matrix.comparisons import AA_CHANGE, IMAGE_CHANGE, MODE_CHANGE, SPEEDUP
from matrixbench.report import arithmetic, stats, verdicts
from matrixbench.report.cells import STATUS_TEXT, CellIndex, is_ok, mode_rank, row_label
from matrixbench.report.modes import MODE_CHANGE_BASELINE, compiled
from matrixbench.report.published import GPUS, TABLE_TITLES, PublishedReference, source_title
from matrixbench.run.placement import format_cpulist
from runner.core import PER_CALL, STATUSES

NOISY_MARK = "†"
BETWEEN_NOISY_MARK = "¶"
ACCURACY_MARK = "‡"
EAGER_FAILED_MARK = "◊"
PUBLISHED_NOTE_MARK = "§"
SIGNIFICANT_MARK = verdicts.STAR
PER_CALL_MARK = "↕"   # the host and the GPU wait for each other inside a call
NO_DATA = "—"
# Every mark is a glyph DejaVu Sans (matplotlib's and most Linux desktops' default) and Liberation Sans
# (Arial's metric twin) both have, so no browser or chart draws it as an empty box (issue 30: ⧖ did);
# tests/test_report_marks.py checks each against the fonts.
ACCURACY_FAILURES = ("fail", "nan")
# timing.flags the runner sets (runner.cudagraphs, runner.gpu_state, runner.timing): mark, meaning.
FLAGS = {
    "no_cudagraphs": ("Ø", "measured without CUDA graphs: the timed loop replayed no CUDA graph, so this "
                           "reduce-overhead/max-autotune number is a default-mode number"),
    "partial_cudagraphs": ("½", "the timed loop replayed fewer CUDA graphs than graphs x calls: some compiled "
                                "graphs ran without CUDA graphs (skipped), so this is partly a default-mode number"),
    "compile_overlap": ("↔", "the timed loop overlapped another slot's compile on this host, which steals CPU "
                             "from launch-bound loops: rerun with --exclusive-timing (slots compile together and "
                             "time one at a time)"),
    "cudagraph_recaptured": ("∆", "a CUDA graph was captured inside the timed loop (re-recording): the "
                                  "latency includes capture work"),
    "throttled": ("▼", "the GPU throttled during the timed loop (power cap, thermal or hardware slowdown): "
                       "the latency is not the GPU's full speed, and a comparison with it is at most undecided, "
                       "never starred"),
    "compile_cache_repaired": ("○", "a first attempt found a broken module in the compile cache and removed it "
                                    "(runner.compile_cache; the runner log names it): this process "
                                    "compiled it again, so its compile time is a partly cold one; its latency is "
                                    "unaffected"),
    "timer_mismatch": ("≠", "event mean and wall-clock mean disagree beyond what launch overhead explains: "
                            "the per-call timer may not have measured the model"),
}
UNKNOWN_FLAG_MARK = "?"
COMPILE_COLUMN = "compile time (median s)"
WARM_COMPILE_COLUMN = "warm compile, later processes (median s)"
FLAGGED_COLUMN = "timing flags"   # the summary's count of cells with a runner's timing.flags (noise is "noisy")
MIXES_TRANSFORMERS = "mixes a transformers change"
MIXES_ATTENTION = "mixes attention implementations"
MIXES_GPUS = "ran on different GPUs"
AA_TITLE = "A/A, one image under two names: "


@dataclass
class Cell:
    text: str
    kind: str = "number"          # number | label | failed | missing
    marks: str = ""               # NOISY_MARK, ACCURACY_MARK (significance is part of the text)
    footnote: Optional[int] = None


@dataclass
class Table:
    title: str
    header: list
    rows: list


@dataclass
class Footnotes:
    """Why cells did not run, and what the page's flagged numbers are, numbered in order of first
    mention; one number per record or published note."""

    texts: list = field(default_factory=list)
    _numbers: dict = field(default_factory=dict)

    def ref(self, row):
        return self.ref_text(row["source"], _failure_reason(row))

    def ref_text(self, key, text):
        if key not in self._numbers:
            self.texts.append(text)
            self._numbers[key] = len(self.texts)
        return self._numbers[key]


def _failure_reason(row):
    error = row["error.message"] or "no message"
    kind = f"{row['error.type']}: " if row["error.type"] else ""
    return f"{STATUS_TEXT[row['status']]} ({_where(row)}): {kind}{_one_line(error)}"


def _where(row):
    return f"{row['image_label']}, {row['device_name']}, batch size {row['cell.batch_size']}, " \
           f"{row_label(row)}, {row['mode_label']}"


def flag_mark(flag):
    return FLAGS.get(flag, (UNKNOWN_FLAG_MARK, ""))[0]


def flags_of(row):
    """The cell's timing flags (none where the record predates them or the cell did not run)."""
    return list(row.get("timing.flags") or ())


def _flag_note(row):
    """What a flagged cell's flags mean, with the record's own evidence for each."""
    parts = [f"{flag_mark(flag)} {flag}: {FLAGS.get(flag, ('', 'flag set by the runner'))[1]}{_evidence(row, flag)}"
             for flag in flags_of(row)]
    return f"Flagged ({_where(row)}): " + "; ".join(parts) + "."


def _evidence(row, flag):
    if flag in ("no_cudagraphs", "partial_cudagraphs", "cudagraph_recaptured"):
        counts = [row.get(f"timing.cudagraphs.{phase}_{kind}") for phase in ("warmup", "timed")
                  for kind in ("captures", "replays")]
        per_call = row.get("timing.cudagraphs.graphs_per_call")
        expected = f" of {per_call} graph(s) x {row.get('timing.n')} calls" if per_call else ""
        if None not in counts:
            return (f" (CUDA graphs captured/replayed: warm-up {counts[0]}/{counts[1]}, "
                    f"timed loop {counts[2]}/{counts[3]}{expected})")
    if flag == "timer_mismatch" and row.get("timing.wall_mean_ms") is not None:
        return f" (event mean {row['timing.mean_ms']:.3f} ms, wall-clock mean {row['timing.wall_mean_ms']:.3f} ms)"
    if flag == "throttled":
        return _throttle_evidence(row)
    return ""


def _throttle_evidence(row):
    found = []
    for end in ("start", "end"):
        clock = row.get(f"timing.gpu_state.{end}.sm_clock_mhz")
        reasons = row.get(f"timing.gpu_state.{end}.throttle_reasons") or []
        if clock is not None or reasons:
            text = f"{end}: SM clock {clock:g} MHz" if clock is not None else f"{end}:"
            found.append(text + (f", {', '.join(reasons)}" if reasons else ""))
    held = [f"{name} limit {row[f'timing.violations.{name}_ms']:g} ms" for name in ("power", "thermal")
            if (row.get(f"timing.violations.{name}_ms") or 0) > 0]
    if held:
        found.append("clocks held down during the loop: " + ", ".join(held))
    return f" ({'; '.join(found)})" if found else ""


def _one_line(text, limit=240):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---- cells -----------------------------------------------------------------------------

def label(text):
    return Cell(str(text), kind="label")


def missing(text=NO_DATA):
    return Cell(text, kind="missing")


def latency(row, notes, suffix=""):
    """A cell's mean latency in ms (noisy ones marked), or its status with a footnote."""
    if row is None:
        return missing()
    if not is_ok(row):
        return status_cell(row, notes)
    footnote = notes.ref_text(("flags", row["source"]), _flag_note(row)) if flags_of(row) else None
    return Cell(f"{row['timing.mean_ms']:.3f}{suffix}", marks=_marks(row), footnote=footnote)


def _marks(row):
    return "".join(mark for mark, _ in marks_of(row))


def marks_of(row):
    """The marks of a cell that ran, in table order, each with its name: noise, a failed accuracy
    check, then its timing flags. The tables append the marks to the latency, the charts draw them."""
    found = [(NOISY_MARK, "noisy within a process")] if row["timing.noisy"] else []
    if row.get("between_noisy"):
        found.append((BETWEEN_NOISY_MARK, "noisy between processes"))
    if row["accuracy.status"] in ACCURACY_FAILURES:
        found.append((ACCURACY_MARK, "accuracy check failed"))
    if row.get("timing.regime") == PER_CALL and row.get("device") == "cuda":
        found.append((PER_CALL_MARK, "per-call latency"))
    return found + [(flag_mark(flag), flag) for flag in flags_of(row)]


def flags_in(cells):
    """Every timing flag some cell that ran carries, in FLAGS order (unknown ones after)."""
    found = {flag for row in cells.rows if is_ok(row) for flag in flags_of(row)}
    return [flag for flag in FLAGS if flag in found] + sorted(found - set(FLAGS))


def flag_legend(flags):
    return " ".join(f"{flag_mark(flag)} {flag}: {FLAGS.get(flag, ('', 'flag set by the runner'))[1]}."
                    for flag in flags) + " A flagged cell's footnote gives the record's evidence."


def status_cell(row, notes):
    return Cell(STATUS_TEXT.get(row["status"], row["status"].upper()), kind="failed", footnote=notes.ref(row))


def speedup_text(eager, compiled):
    """% faster than eager with the speed-up's verdict mark, e.g. "+23.4%*" (verdicts.judge_speedup)."""
    found = verdicts.judge_speedup(eager, compiled)
    return verdicts.marked(found, f"{verdicts.percent(found):+.1f}%")


def compare(baseline, candidate):
    """The judged change of candidate over baseline (verdicts.judge_cells)."""
    return verdicts.judge_cells(baseline, candidate)


def change_text(judgement):
    return verdicts.marked(judgement, f"{verdicts.percent(judgement):+.1f}%")


def interval_cell(judgement):
    if judgement.low is None:
        return label(verdicts.NOT_TESTED_TEXT)
    return Cell(verdicts.interval_pct(judgement))


def verdict_cell(judgement):
    return label(verdicts.verdict_text(judgement))


def ratio(value):
    return Cell(f"{value:.2f}×")


def drop_empty_columns(table):
    """Remove columns where no row has anything to show (only dashes, n/a or baseline)."""
    keep = [i for i in range(len(table.header)) if any(row[i].kind != "missing" for row in table.rows)]
    table.header = [table.header[i] for i in keep]
    table.rows = [[row[i] for i in keep] for row in table.rows]
    return table


# ---- 1. per device and batch size, the seed layout ---------------------------------------

def per_device_tables(cells: CellIndex, notes):
    tables = []
    for device in cells.values("device"):
        for batch in cells.values("batch", device=device):
            for image in cells.values("image", device=device, batch=batch):
                tables.append(_per_device_table(cells, notes, device, batch, image))
    return tables


def _per_device_table(cells, notes, device, batch, image):
    where = {"device": device, "image": image, "batch": batch}
    modes = cells.values("mode", **where)
    rows = []
    for row_key in cells.values("row", **where):
        found = [cells.get(device, image, batch, row_key, mode) for mode in modes]
        rows.append([label(row_label(_first(found)))]
                    + [_mode_cell(row and cells.baseline(row, SPEEDUP), row, notes) for row in found])
    title = f"{device} · batch size {batch} · {cells.image_labels[image]}"
    return drop_empty_columns(Table(title, ["Task/Model"] + modes, rows))


def _mode_cell(eager, row, notes):
    """A row's latency, with its speed-up over ``eager`` (its baseline in the list; None: none)."""
    if row is None or not compiled(row["cell.mode"]) or not is_ok(row):
        return latency(row, notes)
    if not is_ok(eager):
        cell = latency(row, notes)
        cell.marks += EAGER_FAILED_MARK if eager is not None else ""
        return cell
    return latency(row, notes, suffix=f" ({speedup_text(eager, row)})")


def _first(rows):
    return next(row for row in rows if row is not None)


# ---- 2. image A vs image B (stable vs nightly) ------------------------------------------

def _no_rows(cells, old, new, notes):
    return []


def image_pair_tables(cells, notes, rows_under=_no_rows):
    """The image-against-image tables; ``rows_under(cells, old, new, notes)`` gives the rows shown under
    each row (attribution's split: report.share_tables.split_rows)."""
    tables = []
    for device, batch, before, after in image_pairs(cells):
        table = _pair_table(cells, notes, device, batch, before, after, rows_under)
        if table.rows:
            tables.append(table)
    return tables


def image_pairs(cells):
    """(device, batch size, earlier image, later image) of each image-against-image table: the image
    changes of the list (matrixbench.matrix.comparisons: images in matrix order, A/A twins and bridges left out
    of that chain), then each A/A twin after its original."""
    for device in cells.values("device"):
        listed = cells.comparisons[device]
        for batch in cells.values("batch", device=device):
            for kind in (IMAGE_CHANGE, AA_CHANGE):
                pairs = [(c.baseline[0], c.candidate[0]) for c in listed
                         if c.kind == kind and c.candidate[1].batch_size == batch]
                yield from ((device, batch, before, after) for before, after in dict.fromkeys(pairs))


def pair_cells(cells, device, batch, before, after):
    """(earlier, later) rows of the list's comparisons of ``after`` against ``before``, in table order."""
    kind = AA_CHANGE if cells.aa_twins.get(after) == before else IMAGE_CHANGE
    for row_key in cells.values("row", device=device, batch=batch):
        for mode in cells.values("mode", device=device, batch=batch, row=row_key):
            new = cells.get(device, after, batch, row_key, mode)
            old = new and cells.baseline(new, kind)
            if old is not None and new is not None and old["image"] == before:
                yield old, new


PAIRING_COLUMN = 7      # the image-against-image tables' "Pairing" column


def _pair_table(cells, notes, device, batch, before, after, rows_under):
    rows = []
    for old, new in pair_cells(cells, device, batch, before, after):
        # the rows under one (attribution's split) have no pairing of their own: a dash in its column
        under = [[*found[:PAIRING_COLUMN], missing(), *found[PAIRING_COLUMN:]]
                 for found in rows_under(cells, old, new, notes)]
        rows += [_pair_row(old, new, notes), *under]
    names = [cells.image_labels[image] for image in (before, after)]
    header = ["Task/Model", "Mode", f"{names[0]} (ms)", f"{names[1]} (ms)", "Change", "95% interval", "Verdict",
              "Pairing", "Warning"]
    kind = AA_TITLE if cells.aa_twins.get(after) == before else ""
    return drop_empty_columns(Table(f"{kind}{names[0]} → {names[1]} · {device} · batch size {batch}", header, rows))


def _pair_row(old, new, notes):
    start = [label(row_label(old)), label(old["mode_label"]), latency(old, notes), latency(new, notes)]
    warning = _mix_cell(old, new)
    if not (is_ok(old) and is_ok(new)):
        return start + [missing(), missing(), missing(), missing(), warning]
    change = compare(old, new)
    return start + [Cell(change_text(change)), interval_cell(change), verdict_cell(change), pairing_cell(change),
                    warning]


def pairing_cell(judgement):
    """How the row was judged: "paired by round" (with the rounds left out, if any) or "unpaired"
    (verdicts.pairing_description); a dash when not tested."""
    found = verdicts.pairing_description(judgement)
    return label(found) if found else missing()


def mixes(old, new):
    """What besides torch differs between two sides of a row: the transformers version, the
    attention implementation used (where both records say which)."""
    found = []
    versions = old["environment.transformers"], new["environment.transformers"]
    if None not in versions and versions[0] != versions[1]:
        found.append(f"{MIXES_TRANSFORMERS} ({versions[0]} → {versions[1]})")
    used = old.get("attention.used"), new.get("attention.used")
    if None not in used and used[0] != used[1]:
        found.append(f"{MIXES_ATTENTION} ({used[0]} → {used[1]})")
    return found


def gpu_mismatch(old, new):
    """The two sides' GPUs when they did not all run on one and the same GPU (by UUID; records
    without one, as on the CPU, are never a mismatch)."""
    before, after = old.get("gpu_uuids") or [], new.get("gpu_uuids") or []
    if not before or not after or len(set(before) | set(after)) == 1:
        return []
    return [f"{MIXES_GPUS} ({', '.join(before)} → {', '.join(after)})"]


def _mix_cell(old, new):
    found = mixes(old, new) + gpu_mismatch(old, new)
    return label("; ".join(found)) if found else missing()


def mixed_rows(cells, test=mixes):
    """{(device, later image, mode): image-against-image rows for which ``test`` finds something (by
    default: sides that mix more than torch)}, for every (device, later image, mode) that has such a
    table; empty when no row does."""
    counts = {}
    for device, batch, before, after in image_pairs(cells):
        for old, new in pair_cells(cells, device, batch, before, after):
            key = (device, after, old["mode_label"])
            counts[key] = counts.get(key, 0) + bool(test(old, new))
    return counts if any(counts.values()) else {}


# ---- 3. default vs the other compile modes ----------------------------------------------

def compile_mode_tables(cells, notes):
    """Per device and image, each mode-change baseline (``default``, ``default fullgraph``: the list's,
    matrixbench.matrix.comparisons) against the modes judged against it."""
    tables = []
    for device in cells.values("device"):
        for image in cells.values("image", device=device):
            rows = [row for row in cells.select(device=device, image=image) if cells.baseline(row, MODE_CHANGE)]
            defaults = {cells.baseline(row, MODE_CHANGE)["mode_label"]: None for row in rows}
            for default in sorted(defaults, key=mode_rank):
                modes = [mode for mode in cells.values("mode", device=device, image=image)
                         if any(row["mode_label"] == mode and cells.baseline(row, MODE_CHANGE)["mode_label"] == default
                                for row in rows)]
                tables.append(_compile_mode_table(cells, notes, device, image, default, modes))
    return tables


def _compile_mode_table(cells, notes, device, image, default_mode, modes):
    rows = []
    for row_key in cells.values("row", device=device, image=image):
        for batch in cells.values("batch", device=device, image=image, row=row_key):
            others = [cells.get(device, image, batch, row_key, mode) for mode in modes]
            default = next((cells.baseline(other, MODE_CHANGE) for other in others if other is not None), None)
            if default is None:
                continue
            rows.append([label(row_label(default)), label(batch), latency(default, notes)]
                        + [_versus_default(default, other, notes) for other in others])
    header = ["Task/Model", "Batch size", default_mode] + modes
    against = "" if default_mode == MODE_CHANGE_BASELINE else f" · against {default_mode}"
    return drop_empty_columns(Table(f"{device} · {cells.image_labels[image]}{against}", header, rows))


def _versus_default(default, other, notes):
    """The mode's ms with its change against default; "(-4.1%*, 5 of 7 rounds)" where the change was paired on the
    rounds both cells ran and left others out (so it is not the ratio of the two ms: verdicts.rounds_judged_text)."""
    if other is None or not is_ok(other) or not is_ok(default):
        return latency(other, notes)
    change = compare(default, other)
    rounds = verdicts.rounds_judged_text(change)
    return latency(other, notes, suffix=f" ({change_text(change)}{', ' + rounds if rounds else ''})")


# ---- 4. measured vs published ------------------------------------------------------------

def published_tables(cells, notes, published, sources):
    """Each image against its own published source (``sources``: image -> main | nightly | none)."""
    reference = PublishedReference(published)
    tables = []
    for device in cells.values("device"):
        for image in cells.values("image", device=device):
            source = sources[image]
            rows = [row for row in _in_order(cells, device, image) if reference.comparable(row, source)]
            gpu = rows[0]["published_gpu"] if rows else None
            build = _ms_table if gpu else _ratio_table
            table = build(cells, notes, reference, rows, gpu, source)
            if table.rows:
                against = f"published {gpu}" if gpu else "published speed-ups"
                table.title = f"{device} · {cells.image_labels[image]} vs {against}, {source_title(source)}"
                tables.append(table)
    return tables


def _in_order(cells, device, image):
    """A device's and image's rows by model, then batch size, then mode."""
    return [cells.get(device, image, batch, row_key, mode)
            for row_key in cells.values("row", device=device, image=image)
            for batch in cells.values("batch", device=device, image=image, row=row_key)
            for mode in cells.values("mode", device=device, image=image, row=row_key, batch=batch)]


def _ms_table(cells, notes, reference, rows, gpu, source):
    body = []
    for row in rows:
        number = reference.number(source, gpu, row["cell.batch_size"], row["cell.model"], row["cell.mode"])
        if number is not None:
            body.append(_labels(row) + [latency(row, notes), _published_cell(number, notes),
                                        _deviation(row, number), label(TABLE_TITLES[number["table"]])])
    header = ["Task/Model", "Batch size", "Mode", "measured (ms)", "published (ms)", "deviation", "published in"]
    return drop_empty_columns(Table("", header, body))


def _labels(row):
    return [label(row_label(row)), label(row["cell.batch_size"]), label(row["mode_label"])]


def _published_cell(number, notes):
    cell = Cell("OOM", kind="failed") if number["status"] == "oom" else Cell(f"{number['latency_ms']:.3f}")
    if number["note"]:
        cell.marks = PUBLISHED_NOTE_MARK
        cell.footnote = notes.ref_text(_published_key(number), _published_note(number))
    return cell


def _published_key(number):
    return ("published", number["table"], number["gpu"], number["batch_size"], number["model"], number["mode"])


def _published_note(number):
    where = (f"{TABLE_TITLES[number['table']]}, {number['gpu']}, batch size {number['batch_size']}, "
             f"{number['model_label']}, {number['mode']}")
    return f"Published value ({where}): {number['note']}"


def _deviation(row, number):
    if not is_ok(row) or number["status"] != "ok":
        return missing()
    return Cell(f"{arithmetic.deviation_pct(number['latency_ms'], row['timing.mean_ms']):+.1f}%")


def _ratio_table(cells, notes, reference, rows, _gpu, source):
    body = []
    for row in rows:
        if not compiled(row["cell.mode"]):
            continue
        batch, model = row["cell.batch_size"], row["cell.model"]
        published = [_published_ratio(reference, notes, source, gpu, batch, model, row["cell.mode"]) for gpu in GPUS]
        if any(cell.kind != "missing" for cell in published):
            eager = cells.speedup_baseline(row)
            body.append(_labels(row) + [_measured_speedup(eager, row, notes)] + published)
    header = ["Task/Model", "Batch size", "Mode", "measured speed-up"] + [f"{gpu} (published)" for gpu in GPUS]
    return drop_empty_columns(Table("", header, body))


def _published_ratio(reference, notes, source, gpu, batch, model, mode):
    value = reference.speedup(source, gpu, batch, model, mode)
    if value is None:
        return missing()
    cell = ratio(value)
    flagged = [number for number in reference.pair(source, gpu, batch, model, mode) if number["note"]]
    if flagged:
        cell.marks = PUBLISHED_NOTE_MARK
        cell.footnote = notes.ref_text(_published_key(flagged[0]), _published_note(flagged[0]))
    return cell


def _measured_speedup(eager, row, notes):
    for side in (eager, row):
        if side is not None and not is_ok(side):
            return status_cell(side, notes)
    if eager is None:
        return missing()
    return ratio(verdicts.judge_speedup(eager, row).ratio)


# ---- 5. summary per image and mode ------------------------------------------------------

SUMMARY_STATUSES = STATUSES


CELLS_COLUMN = "cells ran"
MIXING_COLUMN = "image-pair rows mixing transformers/attention"
GPU_MIXING_COLUMN = "image-pair rows on different GPUs"
# What a reader needs first (issue 30: the one summary of 17 columns needed a scrollbar): the speed-ups,
# how many cells ran, what is wrong with them, the compile time; the rest in the detail table below it.
SUMMARY_FRONT = ("Device", "Image", "Mode", "geo-mean speed-up", "geo-mean over common cells", CELLS_COLUMN,
                 "accuracy failures", FLAGGED_COLUMN, COMPILE_COLUMN)


def summary_table(cells):
    """The summary's front table (SUMMARY_FRONT): per device, image and mode."""
    return _summary_part(cells, lambda column: column in SUMMARY_FRONT, "Summary")


def summary_details_table(cells):
    """The summary's other columns (each status's count, noise, warm compile, graph breaks, the
    image-pair rows that mix something), beside the same Device, Image and Mode."""
    return _summary_part(cells, lambda column: column in SUMMARY_FRONT[:3] or column not in SUMMARY_FRONT,
                         "Summary, in detail")


def _summary_part(cells, keep, title):
    header, rows = _summary_columns(cells)
    chosen = [index for index, column in enumerate(header) if keep(column)]
    return drop_empty_columns(Table(title, [header[i] for i in chosen], [[row[i] for i in chosen] for row in rows]))


def _summary_columns(cells):
    rows = []
    counted = (mixed_rows(cells), mixed_rows(cells, gpu_mismatch))
    for device in cells.values("device"):
        common = _common_cells(cells, device)
        for image in cells.values("image", device=device):
            for mode in cells.values("mode", device=device, image=image):
                counts = [found.get((device, image, mode)) for found in counted]
                rows.append(_summary_row(cells, device, image, mode, common.get(mode))
                            + [missing() if count is None else Cell(str(count)) for count in counts])
    header = ["Device", "Image", "Mode", "geo-mean speed-up", "geo-mean over common cells", CELLS_COLUMN,
              *SUMMARY_STATUSES, "noisy", "between-process CV (median)", "accuracy failures", FLAGGED_COLUMN,
              COMPILE_COLUMN, WARM_COMPILE_COLUMN, "graph breaks", MIXING_COLUMN, GPU_MIXING_COLUMN]
    return header, rows


def _cells_ran(selected):
    """"5 of 6 (oom 1)": the cells that ran (status ok) of those recorded, and what the others were."""
    others = {}
    for row in selected:
        if row["status"] != "ok":
            others[row["status"]] = others.get(row["status"], 0) + 1
    ran = sum(row["status"] == "ok" for row in selected)
    detail = ", ".join(f"{STATUS_TEXT.get(status, status)} {count}" for status, count in others.items())
    return Cell(f"{ran} of {len(selected)}" + (f" ({detail})" if detail else ""))


def _summary_row(cells, device, image, mode, common):
    selected = cells.select(device=device, image=image, mode=mode)
    ok = [row for row in selected if is_ok(row)]
    counts = [Cell(str(sum(row["status"] == status for row in selected))) for status in SUMMARY_STATUSES]
    is_compiled = compiled(mode)
    geomeans = [_geomean_cell(speedups(cells, ok)), _common_geomean_cell(cells, ok, common)] if is_compiled \
        else [missing("baseline"), missing()]
    return ([label(device), label(cells.image_labels[image]), label(mode)] + geomeans + [_cells_ran(selected)]
            + counts + [Cell(str(sum(bool(row["timing.noisy"]) or bool(row["between_noisy"]) for row in ok))),
                        _median_between_cv(ok)]
            + [Cell(str(sum(row["accuracy.status"] in ACCURACY_FAILURES for row in ok))), _flagged_cell(ok)]
            + ([_median_compile(ok), _median_warm_compile(ok), _graph_breaks(ok)] if is_compiled
               else [missing(), missing(), missing()]))


def _flagged_cell(ok_rows):
    """How many cells carry a timing flag, and which (e.g. "2 (Ø 1, ▼ 1)"); a dash where no record
    has flags (records before schema v2)."""
    if all(row.get("timing.flags") is None for row in ok_rows):
        return missing()
    counts = {}
    for row in ok_rows:
        for flag in flags_of(row):
            counts[flag] = counts.get(flag, 0) + 1
    flagged = sum(bool(flags_of(row)) for row in ok_rows)
    order = [flag for flag in FLAGS if flag in counts] + sorted(set(counts) - set(FLAGS))
    detail = ", ".join(f"{flag_mark(flag)} {counts[flag]}" for flag in order)
    return Cell(f"{flagged} ({detail})" if detail else str(flagged))


def speedups(cells, rows):
    """{(batch size, row key): speed-up} of the compiled rows that ran, passed the accuracy check
    (a wrong output has no speed-up worth quoting) and whose eager cell ran."""
    found = {}
    for row in rows:
        eager = cells.speedup_baseline(row)
        if is_ok(row) and is_ok(eager) and row["accuracy.status"] not in ACCURACY_FAILURES:
            found[(row["cell.batch_size"], row["row_key"])] = verdicts.judge_speedup(eager, row).ratio
    return found


def _common_cells(cells, device):
    """{mode: the (batch, row) cells with a speed-up in every image of the device} when images differ."""
    images = cells.values("image", device=device)
    common = {}
    for mode in cells.values("mode", device=device):
        sets = [set(speedups(cells, cells.select(device=device, image=image, mode=mode))) for image in images]
        if len(sets) > 1 and len(set(map(frozenset, sets))) > 1:
            common[mode] = set.intersection(*sets)
    return common


def _geomean_cell(found):
    value = stats.geometric_mean(list(found.values()))
    count = f"{len(found)} cell" + ("" if len(found) == 1 else "s")
    return Cell(f"{value:.2f}× ({count})") if value else missing("n/a")


def _common_geomean_cell(cells, ok_rows, common):
    if common is None:
        return missing()
    found = speedups(cells, ok_rows)
    return _geomean_cell({key: value for key, value in found.items() if key in common})


def _median_between_cv(ok_rows):
    values = [row["between_cv"] for row in ok_rows if row["between_cv"] is not None]
    return Cell(f"{float(np.median(values)):.3f}") if values else missing()


def _median_compile(ok_rows):
    """The first process's first call (compile included) per cell, median over cells: the cold
    compile unless the image's compile cache was already warm."""
    times = sorted(first for first in (_first_process(row) for row in ok_rows) if first is not None)
    if not times:
        return missing("n/a")
    return Cell(f"{float(np.median(times)):.1f}")


def _first_process(row):
    return row["process_first_call_s"][0] if row["process_first_call_s"] else None


def _median_warm_compile(ok_rows):
    """The later processes' first calls (their compile reads the cache the first one filled),
    median over every such process; missing when no cell has a second process."""
    times = [value for row in ok_rows for value in row["process_first_call_s"][1:] if value is not None]
    return Cell(f"{float(np.median(times)):.1f}") if times else missing()


def _graph_breaks(ok_rows):
    counts = [row["dynamo.graph_breaks"] for row in ok_rows if row["dynamo.graph_breaks"] is not None]
    return Cell(str(int(sum(counts)))) if counts else missing("n/a")


# ---- environment --------------------------------------------------------------------------

# (header, column, characters shown: hashes are cut like `git log --oneline`; the CSV has them whole)
ENVIRONMENT_FIELDS = (
    ("GPUs", "environment.gpu_count"), ("Driver", "environment.driver"),
    ("CUDA", "environment.cuda"), ("cuDNN", "environment.cudnn"), ("torch", "environment.torch"),
    ("torch git", "environment.torch_git", 12), ("transformers", "environment.transformers"),
    ("Attention", "attention.used"),
    ("Python", "environment.python"), ("CPU", "environment.cpu_model"), ("Threads", "environment.threads"),
    ("GPU UUID", "environment.gpu_uuid"), ("Host", "environment.hostname"), ("Image id", "environment.image_id", 19),
)


# Where the processes ran (slot runs only; every process of every cell, not only the last).
PLACEMENT_FIELDS = (
    ("Slot", "placement.slot"), ("Slot GPU index", "placement.gpu_index"), ("Slot GPU UUID", "placement.gpu_uuid"),
    ("Cores", "placement.cores"), ("NUMA node", "placement.numa_node"), ("Other slots timing", "placement.busy_slots"),
)


def environment_table(cells):
    rows = []
    for device in cells.values("device"):
        for image in cells.values("image", device=device):
            selected = cells.select(device=device, image=image)
            processes = [process for row in selected for process in row["process_placements"]]
            rows.append([label(device), label(cells.image_labels[image])]
                        + [_distinct(selected, *field[1:]) for field in ENVIRONMENT_FIELDS]
                        + [_placement_cell(processes, column) for _, column in PLACEMENT_FIELDS])
    header = ["Device", "Image"] + [field[0] for field in ENVIRONMENT_FIELDS + PLACEMENT_FIELDS]
    return drop_empty_columns(Table("Environment", header, rows))


def _placement_cell(processes, column):
    """The distinct values of a placement column over every process, in order (cores as cpuset
    lists, "0-3,8")."""
    values = sorted({tuple(value) if isinstance(value, list) else value for process in processes
                     if (value := process[column]) is not None})
    texts = [format_cpulist(value) if isinstance(value, tuple) else str(value) for value in values]
    return Cell(", ".join(texts), kind="label") if texts else missing()


def cudnn_version(value):
    """"9.19.0" from torch's cuDNN integer (torch.backends.cudnn.version()): major x 10000 + minor x 100 + patch
    from cuDNN 9 on (91900), major x 1000 + minor x 100 + patch before (8902: 8.9.2). The CSVs keep the integer."""
    number = int(value)
    major, rest = (number // 10000, number % 10000) if number >= 90000 else (number // 1000, number % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


# environment columns shown other than as their raw value
_SHOWN_AS = {"environment.cudnn": cudnn_version}


def _distinct(rows, column, width=None):
    values = []
    for row in rows:
        value = row[column]
        text = (None if value is None else _SHOWN_AS[column](value) if column in _SHOWN_AS
                else str(int(value)) if isinstance(value, float) else str(value)[:width])
        if text and text not in values:
            values.append(text)
    return Cell(", ".join(values), kind="label") if values else missing()
