"""The report's "What it costs": tables of report.cost's numbers, and costs.csv.

Per device: images/s, J/image, average power and (with a price for the device) $/million images
of every cell that ran; the cheapest image x mode per model and batch size (with prices); the
compile break-even per compiled cell (cold and warm cache); the run's bill. Without a price the
dollar columns are absent, never zero; a J/image the records cannot give is a dash with its reason
in a footnote.
"""
import csv
import math
from pathlib import Path

from matrixbench.matrix.prices import FROM_COMMAND_LINE
from matrixbench.report import cost, stats, verdicts
from matrixbench.report.cells import row_label
from matrixbench.report.tables import Cell, Table, label, latency, missing

COSTS_FILENAME = "costs.csv"
BILL_FILENAME = "bill.csv"
UNCERTAIN_MARK = "~"
NEVER_TEXT = "never"
INTERVAL_SEPARATOR = " – "   # between a break-even interval's bounds: not ", ", which the bounds' thousands use

LEGEND = (
    "What a cell costs to run. ms: the latency as in the tables above (per cell, the geometric mean of "
    "the processes' mean ms). images/s: batch size × 1000 / ms. J/image: the energy the "
    "device's own counter counted over the timed loop (NVML's total-energy counter on a GPU: the "
    "board's power, not the wall's; RAPL's package counters on a CPU), over timed calls × batch "
    f"size; {UNCERTAIN_MARK} the loop was too short for the counter's update interval to be "
    "negligible (its error bound above 10%). W: that energy over the loop's seconds. $/M images: "
    "your price per device-hour (matrix.yaml `prices:` or `report --price`, with the date you looked "
    "it up) × the seconds a million images take at that latency; absent without a price. "
    "Cheapest: per model and batch size, the priced cell with the fewest dollars per million images "
    "(accuracy failures left out). Break-even: calls after which the compile paid for itself, "
    "(compiled first call − one eager call) / (eager ms − compiled ms), with a cold compile cache "
    "(each cell's first process) and a warm one (the median of its later processes); \"never\" when "
    "the compiled cell is not faster; the interval from the 95% interval of compiled / eager from the "
    f"per-process means (Welch's t on their logs), \"{verdicts.NOT_TESTED_TEXT}\" with fewer than "
    f"{stats.MIN_PROCESSES} processes. "
    "The run's bill: the wall time of every process (failed ones too; image builds and the host's "
    "own time not counted) in device-hours (GPU-hours on a GPU); with a price, in dollars.")


def cost_tables(cells, prices, notes):
    """The section's tables, in reading order (``notes``: the report's Footnotes)."""
    costs = cost.cell_costs(cells, prices)
    found = [_device_table(cells, [c for c in costs if c.row["device_name"] == device], notes, device)
             for device in cells.values("device")]
    found = [table for table in found if table.rows]
    best = cost.cheapest(costs)
    if best:
        found.append(_cheapest_table(best))
    found += _break_even_tables(cells)
    found.append(_bill_table(cost.bill(cells, prices)))
    return found


def _device_table(cells, costs, notes, device):
    """images/s of every cell that ran; J/image and W unless no record of the device has the
    energy fields (records older than schema v3: absent, not a column of dashes); $/M with a price. The ms
    carries the cell's marks and flag footnote as in every other table (tables.latency)."""
    priced = any(c.price for c in costs)
    energy = any(c.energy.reason != cost.NOT_RECORDED for c in costs)
    header = (["Task/Model", "Batch", "Image", "Mode", "ms", "images/s"] + (["J/image", "W"] if energy else [])
              + (["$/M images"] if priced else []))
    rows = []
    for c in costs:
        row = c.row
        line = [label(row_label(row)), label(row["cell.batch_size"]), label(row["image_label"]),
                label(row["mode_label"]), latency(row, notes), Cell(f"{c.images_per_s:.1f}")]
        line += [_energy_cell(c.energy, notes), _number(c.energy.average_power_w, "{:.1f}")] if energy else []
        rows.append(line + ([_dollars(c.usd_per_million)] if priced else []))
    return Table(f"Throughput, energy and price · {device}", header, rows)


def _energy_cell(energy, notes):
    if energy.joules_per_image is None:
        return Cell("—", kind="missing", footnote=notes.ref_text(("energy", energy.reason),
                                                                 f"No energy per image: {energy.reason}."))
    return Cell((UNCERTAIN_MARK if energy.uncertain else "") + _significant(energy.joules_per_image))


def _significant(value):
    """Three significant figures, plain notation (0.0123, 1.23, 123)."""
    if value == 0:
        return "0"
    digits = max(3 - 1 - int(math.floor(math.log10(abs(value)))), 0)
    return f"{value:.{digits}f}"


def _number(value, spec):
    return missing() if value is None else Cell(spec.format(value))


def dollars(value):
    """Dollars to the cent, or under a cent to three significant figures (0.000667: a short run's bill at a CPU's
    price), never shown as 0.00; the CSVs keep every digit."""
    return f"{value:.2f}" if value == 0 or abs(value) >= 0.01 else _significant(value)


def _dollars(value):
    return missing() if value is None else Cell(dollars(value))


def _cheapest_table(best):
    header = ["Task/Model", "Batch", "Device", "Image", "Mode", "$/M images", "images/s"]
    rows = [[label(row_label(c.row)), label(c.row["cell.batch_size"]), label(c.row["device_name"]),
             label(c.row["image_label"]), label(c.row["mode_label"]), Cell(dollars(c.usd_per_million)),
             Cell(f"{c.images_per_s:.1f}")] for c in best]
    return Table("Cheapest image × mode per model and batch size", header, rows)


def _break_even_tables(cells):
    found = cost.paybacks(cells)
    tables = []
    for device in cells.values("device"):
        lines = [p for p in found if p.row["device_name"] == device]
        if not lines:
            continue
        warm = any(p.warm for p in lines)
        header = ["Task/Model", "Batch", "Image", "Mode", "compile, cold (s)", "break-even, cold (calls)",
                  "95% interval"] + (["compile, warm (s)", "break-even, warm (calls)", "95% interval, warm"]
                                     if warm else [])
        rows = []
        for p in lines:
            row = p.row
            rows.append([label(row_label(row)), label(row["cell.batch_size"]), label(row["image_label"]),
                         label(row["mode_label"])] + _payback_cells(p.cold)
                        + ((_payback_cells(p.warm) if p.warm else [missing()] * 3) if warm else []))
        tables.append(Table(f"Compile break-even · {device}", header, rows))
    return tables


def _payback_cells(result):
    interval = (label(verdicts.NOT_TESTED_TEXT) if result.low is None
                else Cell(f"[{calls_text(result.low)}{INTERVAL_SEPARATOR}{calls_text(result.high)}]"))
    return [Cell(f"{result.compile_s:.1f}"), Cell(calls_text(result.calls)), interval]


def calls_text(calls):
    """Whole calls, rounded up (a float a hair above a whole number is that number)."""
    return NEVER_TEXT if calls == cost.NEVER else f"{math.ceil(calls - 1e-9):,}"


def _bill_table(lines):
    priced = any(line.price for line in lines)
    header = ["Device", "Image", "Processes", "device-hours"] + (["$"] if priced else [])
    rows = [[label(line.device), label(line.image), Cell(str(line.processes)), Cell(f"{line.hours:.4f}")]
            + ([_dollars(line.usd)] if priced else []) for line in lines]
    total_usd = sum(line.usd for line in lines if line.usd is not None)
    rows.append([label("Total"), label("all images"), Cell(str(sum(line.processes for line in lines))),
                 Cell(f"{sum(line.hours for line in lines):.4f}")] + ([Cell(dollars(total_usd))] if priced else []))
    return Table("The run's bill", header, rows)


# ---- CSV -----------------------------------------------------------------------------------

def write_costs(cells, prices, out_dir):
    """costs.csv (one line per cell that ran) and bill.csv; every number's unit in its column name.
    Dollar columns only when some price is known: absent, never zero."""
    costs = cost.cell_costs(cells, prices)
    paid = {id(p.row): p for p in cost.paybacks(cells)}
    priced = any(c.price for c in costs)
    lines = [_cost_line(c, paid.get(id(c.row)), priced) for c in costs]
    out_dir = Path(out_dir)
    written = [_write_csv(out_dir / COSTS_FILENAME, lines)]
    bill = [_bill_line(line, priced) for line in cost.bill(cells, prices)]
    written.append(_write_csv(out_dir / BILL_FILENAME, bill))
    return written


def _cost_line(c, payback, priced):
    row, energy = c.row, c.energy
    line = {"device": row["device_name"], "image": row["image"], "model": row["row_key"],
            "batch_size": row["cell.batch_size"], "mode": row["mode_label"], "mean_latency_ms": row["timing.mean_ms"],
            "throughput_images_per_s": c.images_per_s, "energy_per_image_j": energy.joules_per_image,
            "average_power_w": energy.average_power_w, "energy_uncertain": energy.uncertain,
            "energy_source": energy.source, "energy_missing_reason": energy.reason,
            "throttled": "throttled" in (row.get("timing.flags") or ())}
    if priced:
        line.update(price_usd_per_hour=c.price.usd_per_hour if c.price else None,
                    price_looked_up=_looked_up(c.price), cost_usd_per_million_images=c.usd_per_million)
    for cache in ("cold", "warm"):   # a break-even of never (cost.NEVER, math.inf) is written inf: a number to pandas
        result = getattr(payback, cache) if payback else None
        line.update({f"compile_{cache}_s": result.compile_s if result else None,
                     f"break_even_{cache}_calls": result.calls if result else None,
                     f"break_even_{cache}_low_calls": result.low if result else None,
                     f"break_even_{cache}_high_calls": result.high if result else None})
    return line


def _looked_up(price):
    if price is None:
        return None
    return "" if price.looked_up == FROM_COMMAND_LINE else price.looked_up


def _bill_line(line, priced):
    data = {"device": line.device, "image": line.image, "processes": line.processes,
            "device_hours_h": line.hours}
    if priced:
        data["cost_usd"] = line.usd
    return data


def _write_csv(path, lines):
    header = list(lines[0]) if lines else ["device"]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(lines)
    return path
