"""What a cell costs: images per second, joules per image, dollars per million images, the calls
after which a compile pays for itself, and the run's own bill. Numbers only; report.cost_tables
lays them out.

- images/s = batch size x 1000 / the cell's ms (stats.cell_estimate: the geometric mean of its
  processes' mean ms).
- J/image = loop energy / (timed calls x batch size), summed over the processes whose record has
  the energy (schema v3, runner.energy); None (with the record's reason) where none has.
- $/million images = price per hour / 3600 x (mean ms / 1000 / batch size) x 10^6; only where the
  user gave a price for the device (matrixbench.matrix.prices), never a made-up zero.
- break-even calls = (first call of the compiled cell - one eager call) / (eager ms - compiled ms),
  per compile cache: cold (the cell's first process) and warm (the median of its later ones);
  "never" when the compiled cell is not faster. Its interval comes from the interval of the
  compiled/eager ratio from the per-process means (report.stats.contrast); none with one process.
- the bill: every process's wall time (``duration_s``, ok or not), per device and image and in total.
"""
import math
import statistics
from dataclasses import dataclass
from typing import List, Optional, Tuple

from matrixbench.matrix.prices import Price, price_for
from matrixbench.report import arithmetic, stats
from matrixbench.report.cells import is_ok
from matrixbench.report.modes import compiled

SECONDS_PER_HOUR = arithmetic.SECONDS_PER_HOUR
NEVER = arithmetic.NEVER


images_per_second = arithmetic.images_per_second
usd_per_million_images = arithmetic.usd_per_million_images
break_even_calls = arithmetic.break_even_calls


@dataclass(frozen=True)
class Energy:
    joules_per_image: Optional[float]
    average_power_w: Optional[float]
    uncertain: bool               # some process's counter was within its error bound (runner.energy)
    reason: Optional[str]         # why joules_per_image is None
    source: Optional[str]


NOT_RECORDED = "not recorded (the records predate schema v3)"


def cell_energy(row) -> Energy:
    """Energy per image of a cell from its ok processes' loop energy (cells.process_costs)."""
    batch = row["cell.batch_size"]
    measured = [p for p in row.get("process_energy") or () if p.get("energy_j") is not None and p.get("n")]
    if not measured:
        reasons = [p.get("reason") for p in row.get("process_energy") or () if p.get("reason")]
        return Energy(None, None, False, reasons[-1] if reasons else NOT_RECORDED, None)
    joules = sum(p["energy_j"] for p in measured)
    images = sum(p["n"] * batch for p in measured)
    seconds = sum(p["loop_s"] or 0.0 for p in measured)
    return Energy(joules / images, joules / seconds if seconds > 0 else None,
                  any(bool(p.get("uncertain")) for p in measured), None, measured[-1].get("source"))


@dataclass(frozen=True)
class CellCost:
    row: dict
    images_per_s: float
    energy: Energy
    price: Optional[Price]
    usd_per_million: Optional[float]


def cell_cost(row, prices) -> Optional[CellCost]:
    """The costs of one ok cell (None for a cell that did not run)."""
    if not is_ok(row):
        return None
    batch, mean_ms = row["cell.batch_size"], row["timing.mean_ms"]
    price = price_for(row["device_name"], prices)
    dollars = usd_per_million_images(price.usd_per_hour, mean_ms, batch) if price else None
    return CellCost(row, images_per_second(batch, mean_ms), cell_energy(row), price, dollars)


def unmatched_price_notes(given, cells) -> List[str]:
    """A note per ``--price`` whose GPU type names none of the records' devices (it prices nothing,
    so no dollar column shows it), naming the devices there are."""
    devices = cells.values("device")
    return [f"--price {price.gpu_type}={price.usd_per_hour:g} prices nothing: no record's device matches "
            f"{price.gpu_type} (the devices here: {'; '.join(devices) or 'none'})."
            for price in given if not any(price_for(device, {price.gpu_type: price}) for device in devices)]


def ordered_rows(cells):
    """The index's cells in report order: device, batch size, model, image, mode."""
    for device in cells.values("device"):
        for batch in cells.values("batch", device=device):
            for row_key in cells.values("row", device=device, batch=batch):
                for image in cells.values("image", device=device, batch=batch, row=row_key):
                    for mode in cells.values("mode", device=device, batch=batch, row=row_key, image=image):
                        yield cells.get(device, image, batch, row_key, mode)


def cell_costs(cells, prices) -> List[CellCost]:
    """Every ok cell's costs, in report order."""
    found = [cell_cost(row, prices) for row in ordered_rows(cells)]
    return [cost for cost in found if cost is not None]


def trusted(cost: CellCost) -> bool:
    """A cell that may be the cheapest: its accuracy check did not fail."""
    return cost.row.get("accuracy.status") not in ("fail", "nan")


def cheapest(costs: List[CellCost]) -> List[CellCost]:
    """Per model (row) and batch size, the priced cell with the fewest dollars per million images
    (every device, image and mode; accuracy failures left out), in first-seen order."""
    best: dict = {}
    for cost in costs:
        if cost.usd_per_million is None or not trusted(cost):
            continue
        key = (cost.row["row_key"], cost.row["cell.batch_size"])
        if key not in best or cost.usd_per_million < best[key].usd_per_million:
            best[key] = cost
    return list(best.values())


@dataclass(frozen=True)
class BreakEven:
    """Calls after which the compile paid for itself (NEVER: compiled is not faster)."""

    compile_s: float                       # the compiled cell's first call: torch.compile + forward
    calls: float
    low: Optional[float] = None            # the interval, from the ratio of means' interval
    high: Optional[float] = None

    @property
    def never(self):
        return self.calls == NEVER


def break_even(first_call_s, eager_row, compiled_row) -> BreakEven:
    """The break-even of one compile against the eager cell, with its interval where both cells
    ran in enough processes: the bounds of compiled/eager give the bounds of the saving."""
    eager_ms, compiled_ms = eager_row["timing.mean_ms"], compiled_row["timing.mean_ms"]
    calls = break_even_calls(first_call_s, eager_ms, compiled_ms)
    bounds = ratio_interval(eager_row, compiled_row)
    if bounds is None:
        return BreakEven(first_call_s, calls)
    low_ratio, high_ratio = bounds
    return BreakEven(first_call_s, calls,
                     break_even_calls(first_call_s, eager_ms, eager_ms * low_ratio),
                     break_even_calls(first_call_s, eager_ms, eager_ms * high_ratio))


def ratio_interval(eager_row, compiled_row) -> Optional[Tuple[float, float]]:
    """The interval of compiled / eager from the cells' per-process means (report.stats.contrast:
    Welch's t on log process means), or None with fewer than MIN_PROCESSES processes a side."""
    eager, compiled = eager_row.get("process_means") or [], compiled_row.get("process_means") or []
    if min(len(eager), len(compiled)) < stats.MIN_PROCESSES:
        return None
    _, low, high, _ = stats.contrast([eager, compiled], [-1.0, 1.0])
    return math.exp(low), math.exp(high)


@dataclass(frozen=True)
class CompilePayback:
    row: dict
    eager: dict
    cold: BreakEven
    warm: Optional[BreakEven]          # None without later processes


def payback(eager_row, compiled_row) -> Optional[CompilePayback]:
    """Break-even with a cold and a warm compile cache, for a compiled cell whose eager ran."""
    if not (is_ok(eager_row) and is_ok(compiled_row)) or not compiled(compiled_row["cell.mode"]):
        return None
    first_calls = [value for value in compiled_row.get("process_first_call_s") or () if value is not None]
    if not first_calls:
        return None
    warm = break_even(statistics.median(first_calls[1:]), eager_row, compiled_row) if len(first_calls) > 1 else None
    return CompilePayback(compiled_row, eager_row, break_even(first_calls[0], eager_row, compiled_row), warm)


def paybacks(cells) -> List[CompilePayback]:
    """Every compiled cell's payback against its eager cell, in report order."""
    found = []
    for row in ordered_rows(cells):
        eager = cells.speedup_baseline(row)
        result = payback(eager, row) if eager is not None else None
        if result is not None:
            found.append(result)
    return found


@dataclass(frozen=True)
class BillLine:
    device: str
    image: str
    processes: int
    hours: float
    price: Optional[Price]

    @property
    def usd(self):
        return self.price.usd_per_hour * self.hours if self.price else None


def bill(cells, prices) -> List[BillLine]:
    """Device-hours per device and image, in report order (devices as the tables, images in matrix order:
    CellIndex.images()): every process's wall time (failed ones too), as the records give it. One process holds
    one GPU, so on a GPU these are GPU-hours."""
    totals: dict = {}
    for row in cells.rows:
        durations = [value for value in row.get("process_duration_s") or () if value is not None]
        key = (row["device_name"], row["image"])
        processes, seconds = totals.get(key, (0, 0.0))
        totals[key] = (processes + len(durations), seconds + sum(durations))
    devices, images = cells.values("device"), cells.images()
    order = sorted(totals, key=lambda key: (devices.index(key[0]) if key[0] in devices else len(devices),
                                            images.index(key[1]) if key[1] in images else len(images)))
    return [BillLine(device, image, totals[(device, image)][0], totals[(device, image)][1] / SECONDS_PER_HOUR,
                     price_for(device, prices)) for device, image in order]
