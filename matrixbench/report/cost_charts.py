"""Charts of "What it costs": per device and batch size, energy per image and compile break-even
(cold cache) per model, one bar per image and mode, coloured by mode and hatched by image as the latency and
speed-up charts are (one mode, one colour in every chart of a report). A chart is drawn only where it has a bar:
no energy recorded (schema v2 records, VMs without RAPL, GPUs without the counter) draws none.
A break-even of "never" is labelled at the axis instead of a bar. An energy bar whose counter was within its error
bound carries the throughput table's mark (~) after its end, with a legend entry.
"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.transforms import offset_copy  # noqa: E402

from matrixbench.report import cost  # noqa: E402
from matrixbench.report.cells import row_label  # noqa: E402
from matrixbench.report.charts import CHART_DIR, HATCHES, MARK_SIZE, MARK_STEP, _room_for_marks, _save  # noqa: E402
from matrixbench.report.records import slug  # noqa: E402

BAR_HEIGHT = 0.8
UNCERTAIN_LEGEND = "uncertain: the counter's error bound above 10% (a short loop)"   # beside the ~ marker


def write_cost_charts(cells, out_dir, prices=None):
    """The PNGs, per device and batch size: energy per image, then break-even."""
    folder = out_dir / CHART_DIR
    folder.mkdir(parents=True, exist_ok=True)
    costs = cost.cell_costs(cells, prices or {})
    energy = {id(c.row): c.energy.joules_per_image for c in costs}
    uncertain = {id(c.row) for c in costs if c.energy.uncertain and c.energy.joules_per_image is not None}
    paid = {id(p.row): p.cold.calls for p in cost.paybacks(cells)}
    charts = []
    for device in cells.values("device"):
        for batch in cells.values("batch", device=device):
            heading = f"{device}, batch size {batch}"
            name = f"{slug(device)}_bs{batch}"
            charts += _chart(cells, device, batch, energy, "J per image", f"{heading}: energy per image (J)",
                             folder, f"{name}_energy.png", uncertain)
            charts += _chart(cells, device, batch, paid, "calls until the compile paid for itself (cold cache)",
                             f"{heading}: compile break-even (calls, cold cache)", folder, f"{name}_break_even.png")
    return charts


def _chart(cells, device, batch, values, axis_label, title, folder, filename, uncertain=frozenset()):
    """One chart's bars; ``uncertain``: the ids of the rows whose bar gets the ~ mark."""
    rows = cells.values("row", device=device, batch=batch)
    images, modes = cells.values("image", device=device, batch=batch), cells.values("mode", device=device, batch=batch)
    series = [(image, mode) for image in images
              for mode in cells.values("mode", device=device, batch=batch, image=image)]
    found = {(image, mode, row_key): values.get(id(cells.get(device, image, batch, row_key, mode)))
             for image, mode in series for row_key in rows}
    series = [(image, mode) for image, mode in series
              if any(found[(image, mode, row_key)] is not None for row_key in rows)]
    if not series:
        return []
    figure, axes = plt.subplots(figsize=(9, 1.2 + 0.32 * len(rows) * len(series)))
    marked = []
    for index, (image, mode) in enumerate(series):
        offset = (index - (len(series) - 1) / 2) * BAR_HEIGHT / len(series)
        bars = [(position + offset, found[(image, mode, row_key)]) for position, row_key in enumerate(rows)]
        finite = [(y, value) for y, value in bars if value is not None and value != cost.NEVER]
        axes.barh([y for y, _ in finite], [value for _, value in finite], height=BAR_HEIGHT / len(series),
                  label=f"{cells.image_labels[image]} · {mode}", color=f"C{modes.index(mode)}", edgecolor="white",
                  hatch=HATCHES[images.index(image) % len(HATCHES)])
        marked += [(value, y) for (y, value), row_key in zip(bars, rows)
                   if value is not None and id(cells.get(device, image, batch, row_key, mode)) in uncertain]
        for y, value in bars:
            if value == cost.NEVER:
                axes.text(0, y, " never", va="center", ha="left", fontsize=8, color="firebrick")
    axes.set_yticks(range(len(rows)))
    axes.set_yticklabels([row_label(_any_row(cells, device, batch, row_key)) for row_key in rows])
    axes.invert_yaxis()
    axes.set_xlabel(axis_label)
    axes.set_title(title)
    if marked:
        # the table's ~ drawn as mathtext's \sim: in mathtext a bare ~ is a space, which has no glyph to draw
        shift = offset_copy(axes.transData, fig=figure, units="points", x=MARK_STEP, y=0)
        axes.scatter([x for x, _ in marked], [y for _, y in marked], s=MARK_SIZE, marker=r"$\sim$",
                     color="black", linewidths=0, transform=shift, label=UNCERTAIN_LEGEND, zorder=3)
        _room_for_marks(axes, [(x, 1) for x, _ in marked])
    axes.legend(fontsize=7, loc="best")
    return [_save(figure, folder, filename, title)]


def _any_row(cells, device, batch, row_key):
    return cells.select(device=device, batch=batch, row=row_key)[0]
