"""Charts like the seed page's: per device and batch size, latency bars and speed-up per model."""
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from matrixbench.report import arithmetic  # noqa: E402
from matrixbench.report.cells import STATUS_TEXT, is_ok, row_label  # noqa: E402
from matrixbench.report.records import slug  # noqa: E402

CHART_DIR = "charts"
BAR_HEIGHT = 0.8
HATCHES = ("", "//", "..", "xx", "\\\\", "++")   # one per image; colour is per mode


@dataclass(frozen=True)
class Chart:
    title: str
    path: Path          # where the PNG was written
    relative: str       # the path relative to the report folder, for Markdown links


def write_charts(cells, out_dir):
    """Two PNGs per device and batch size (durations, speed-ups); returns them in order."""
    folder = Path(out_dir) / CHART_DIR
    folder.mkdir(parents=True, exist_ok=True)
    charts = []
    for device in cells.values("device"):
        for batch in cells.values("batch", device=device):
            plot = _Plot(cells, device, batch)
            charts.append(plot.draw(folder, "duration", f"{device}, batch size {batch}: latency (ms)"))
            if plot.has_speedups():
                charts.append(plot.draw(folder, "speedup", f"{device}, batch size {batch}: speed-up over eager (%)"))
    return charts


class _Plot:
    """The bars of one device and batch size: one group per model, one bar per image and mode."""

    def __init__(self, cells, device, batch):
        self.cells, self.device, self.batch = cells, device, batch
        self.row_keys = cells.values("row", device=device, batch=batch)
        self.images = cells.values("image", device=device, batch=batch)
        self.modes = cells.values("mode", device=device, batch=batch)
        self.series = [(image, mode) for image in self.images
                       for mode in cells.values("mode", device=device, batch=batch, image=image)]

    def has_speedups(self):
        """Is there a compiled cell whose eager cell also ran? Else a speed-up chart has no bars."""
        return any(self._value(self.cells.get(self.device, image, self.batch, row_key, mode), image, row_key,
                               "speedup") is not None
                   for image, mode in self.compiled_series() for row_key in self.row_keys)

    def compiled_series(self):
        return [(image, mode) for image, mode in self.series if mode != "eager"]

    def draw(self, folder, kind, title):
        series = self.series if kind == "duration" else self.compiled_series()
        figure, axes = plt.subplots(figsize=(9, 1.2 + 0.32 * len(self.row_keys) * len(series)))
        try:
            for index, (image, mode) in enumerate(series):
                self._bars(axes, index, len(series), image, mode, kind)
            self._decorate(axes, title, kind)
            path = folder / f"{slug(self.device)}_bs{self.batch}_{kind}.png"
            figure.savefig(path, dpi=100, bbox_inches="tight", metadata={"Software": None})
        finally:
            plt.close(figure)
        return Chart(title, path, f"{CHART_DIR}/{path.name}")

    def _bars(self, axes, index, count, image, mode, kind):
        offset = (index - (count - 1) / 2) * BAR_HEIGHT / count
        positions, values, failures = [], [], []
        for position, row_key in enumerate(self.row_keys):
            row = self.cells.get(self.device, image, self.batch, row_key, mode)
            value = self._value(row, image, row_key, kind)
            if value is not None:
                positions.append(position + offset)
                values.append(value)
            elif row is not None and not is_ok(row):
                failures.append((position + offset, STATUS_TEXT.get(row["status"], row["status"])))
        axes.barh(positions, values, height=BAR_HEIGHT / count, label=f"{image} {mode}",
                  color=f"C{self.modes.index(mode)}", edgecolor="white",
                  hatch=HATCHES[self.images.index(image) % len(HATCHES)])
        for position, text in failures:
            axes.text(0, position, f" {text}", va="center", fontsize=7, color="firebrick")

    def _value(self, row, image, row_key, kind):
        if not is_ok(row):
            return None
        if kind == "duration":
            return row["timing.mean_ms"]
        eager = self.cells.get(self.device, image, self.batch, row_key, "eager")
        return arithmetic.percent_faster(eager["timing.mean_ms"], row["timing.mean_ms"]) if is_ok(eager) else None

    def _decorate(self, axes, title, kind):
        labels = [row_label(self.cells.select(device=self.device, batch=self.batch, row=key)[0])
                  for key in self.row_keys]
        axes.set_yticks(range(len(labels)), labels)
        axes.invert_yaxis()
        axes.set_xlabel("mean latency (ms)" if kind == "duration" else "speed-up over eager (%)")
        axes.axvline(0, color="black", linewidth=0.6)
        axes.set_title(title)
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        axes.grid(axis="x", alpha=0.3)
