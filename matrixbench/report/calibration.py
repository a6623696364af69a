"""The interference calibration's table (matrixbench.executors.calibration): per cell, loaded / alone.

A calibration cell ran on each slot alone (one slot busy), then on every slot at once; each slot's
each round is one process. Its row: per phase, the cell's ms (stats.cell_estimate: the geometric
mean of its processes' mean ms),
loaded / alone judged like every comparison (verdicts.judge_cells: Welch's t on the phases' log
process means; above 1, slower beside the other slots) with its 95% interval and verdict, tested
when both phases have stats.MIN_PROCESSES processes or more.
"""
from matrixbench.report import verdicts
from matrixbench.report.cells import STATUS_TEXT, combine_repeats, image_labels, is_ok, mode_rank, row_label
from matrixbench.report.records import plain_value
from matrixbench.report.tables import Cell, Table, drop_empty_columns, label, missing, verdict_cell

KEY = ("device_name", "image", "row_key", "cell.batch_size", "mode_label")
HEADER = ["Task/Model", "Batch size", "Mode", "alone (ms)", "loaded (ms)", "loaded / alone", "95% interval",
          "Verdict", "processes (alone / loaded)", "slots", "other slots timing (loaded)"]


def phase_pairs(frame):
    """(alone, loaded) combined rows (cells.combine_repeats: every slot's every round a process) of
    each calibration cell in ``frame``, in table order; a phase without records is None."""
    rows = [{key: plain_value(value) for key, value in row.items()} for row in frame.to_dict("records")]
    phases = {(_key(row), row["calibration.phase"]): row
              for row in combine_repeats(rows, lambda row: (_key(row), row["calibration.phase"]))}
    return [(phases.get((key, "alone")), phases.get((key, "loaded")))
            for key in sorted({key for key, _ in phases}, key=_order)]


def calibration_tables(frame):
    """One table per device and image of the calibration records in ``frame`` (none: [])."""
    pairs = phase_pairs(frame)
    labels = image_labels([alone or loaded for alone, loaded in pairs])
    tables = {}
    for alone, loaded in pairs:
        first = alone or loaded
        tables.setdefault(f"{first['device_name']} · {labels[first['image']]}", []).append(_row(alone, loaded))
    return [drop_empty_columns(Table(title, list(HEADER), body)) for title, body in tables.items()]


def _key(row):
    return tuple(row[column] for column in KEY)


def _order(key):
    device, image, row_key, batch, mode = key
    return (device, image, row_key, batch, mode_rank(mode))


def _row(alone, loaded):
    first = alone or loaded
    start = [label(row_label(first)), label(first["cell.batch_size"]), label(first["mode_label"]),
             _latency(alone), _latency(loaded)]
    end = [_processes(alone, loaded), label(first["calibration.slots"]), _timing_beside(loaded)]
    if not (is_ok(alone) and is_ok(loaded)):
        return start + [missing(), missing(), missing()] + end
    found = verdicts.judge_cells(alone, loaded)
    bounds = label(verdicts.NOT_TESTED_TEXT) if found.low is None else Cell(f"[{found.low:.3f}×, {found.high:.3f}×]")
    return start + [Cell(verdicts.marked(found, f"{found.ratio:.3f}×")), bounds, verdict_cell(found)] + end


def _latency(row):
    if row is None:
        return missing()
    if not is_ok(row):
        return Cell(STATUS_TEXT.get(row["status"], row["status"].upper()), kind="failed")
    return Cell(f"{row['timing.mean_ms']:.3f}")


def _processes(alone, loaded):
    return label(" / ".join(str(row["processes"] if row else 0) for row in (alone, loaded)))


def _timing_beside(loaded):
    """How many other slots the loaded processes saw timing (the timing board's ``busy_slots``), as
    "value ×processes" from most to fewest; a dash where the records do not say."""
    seen = [process["placement.busy_slots"] for process in (loaded or {}).get("process_placements", [])
            if process["placement.busy_slots"] is not None]
    if not seen:
        return missing()
    return label(", ".join(f"{value} ×{seen.count(value)}" for value in sorted(set(seen), reverse=True)))
