"""The speed-ups paired in one process (issue 32 item 2, issue 34 item 3), beside the unpaired ones.

Each compiled process times eager and compiled alternately in short blocks after its own timed loop,
so both sides of each block pair ran under the same host state; comparisons.csv's ``paired_speedup``
rows judge them (stats.judge_paired: each process one draw). This table sets each beside the
``speedup`` row of the same cell (separate eager processes), so a reader sees how much of the unpaired
interval was the host's.
"""
from matrixbench.report.comparisons import PAIRED_SPEEDUP
from matrixbench.report.tables import Cell, Table
from matrixbench.report.verdicts import MARKS

LEGEND = (
    "Each compiled process, after its own timed loop, times the eager model and the compiled one "
    "alternately in short blocks (`timing.paired`), so both sides of a block pair ran under the same host "
    "state. Paired: eager / compiled from those blocks, each process one draw (the median of its blocks' log "
    "ratios), Student's t across the processes. Unpaired: the speed-up of the latency tables (separate "
    "eager processes, Welch's t). Where the host moved between processes (launch-bound cells on a virtual "
    "machine), the unpaired interval widens and the paired one does not. Marks as in the verdicts legend; "
    "intervals are 95%. Run with `--no-paired` to leave the blocks out.")
HEADER = ["Device", "Image", "Task/Model", "Batch size", "Mode", "paired speed-up [95%]",
          "unpaired speed-up [95%]", "processes paired"]


def paired_tables(derived):
    """One table of the ``paired_speedup`` rows of comparisons.csv (``derived``), each beside its
    ``speedup`` row, without a title of its own (the report's section "Speed-ups paired in one process" heads
    it; the templates give an untitled table no heading); [] when no record has paired blocks."""
    unpaired = {_where(row): row for row in derived if row["kind"] == "speedup"}
    rows = [[Cell(row["device"], "label"), Cell(row["image"], "label"), Cell(row["task_model"], "label"),
             Cell(str(row["batch_size"]), "label"), Cell(row["mode"], "label"), Cell(_speedup(row)),
             Cell(_speedup(unpaired.get(_where(row)))), Cell(str(row["processes"]))]
            for row in derived if row["kind"] == PAIRED_SPEEDUP]
    return [Table("", HEADER, rows)] if rows else []   # untitled: the section's title says it


def _where(row):
    return (row["device"], row["image"], row["batch_size"], row["model"], row["mode"])


def _speedup(row):
    if row is None:
        return "—"
    text = f"{row['estimate_ratio']:.2f}×{MARKS[row['verdict']]}"
    if row.get("ratio_low") is None or row.get("ratio_high") is None:
        return f"{text} (not tested)"
    return f"{text} [{row['ratio_low']:.2f}, {row['ratio_high']:.2f}]"
