"""Charts like the seed page's, and some it lacks.

Per device and batch size: latency bars and the speed-up over eager per model (every image and
mode), as a ratio (eager ms / compiled ms, ×) on a log axis: ×2 and ×0.5 lie equally far from ×1,
and the frame is set by the bars, so an interval that reaches past it (two processes a side give
wide ones) ends in an arrow at the frame's edge instead of stretching the frame and flattening
every bar (issue 30: an H100 report's axis ran to 7000%); with two or more images, the same mode of
each image side by side per model (the torch-version question) and each cell's % change against the
previous image; with a compiled mode other than default, each such cell's % change against the
default mode. Per device:
measured against published, one point per cell, with the y=x line (ms against ms on one of the
page's GPUs, else speed-ups against each of its GPUs).
A cell that did not run is labelled inside the plot (OOM, ERR, ...), and so is a compiled cell
whose eager cell did not run ("no eager"). A flagged cell (noisy, accuracy failed, a timing flag:
no_cudagraphs, throttled, ...) gets the tables' marks (†, Ø, ▼, ...) as markers beside its bar's
end or its point, each mark with a legend entry, inside the frame (a latency chart's right edge makes room for
them: _room_for_marks). Speed-up and change bars carry their 95% interval
as a line (report.verdicts.judge_speedup / judge_cells: the judgements comparisons.csv holds; none with
one process per cell), clipped at the frame the bars set (_frame: an arrow where it reaches past), and
an undecided one a "?" beside its bar, inside the frame. A change bar whose % is not the ratio of the two
cells' ms (in turns, or paired on some rounds: verdicts.not_the_ms_ratio) is marked at its base, and the
axis label says "unless marked".
"""
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402
from matplotlib.transforms import offset_copy  # noqa: E402

from matrixbench.report import arithmetic, stats, verdicts  # noqa: E402
from matrixbench.report.cells import STATUS_TEXT, is_ok, mode_rank, row_label  # noqa: E402
from matrixbench.report.modes import BASELINE_OF, compiled
from matrixbench.report.published import GPUS, PublishedReference, source_title  # noqa: E402
from matrixbench.report.records import slug  # noqa: E402
from matrixbench.report.tables import marks_of  # noqa: E402

CHART_DIR = "charts"
BAR_HEIGHT = 0.8
HATCHES = ("", "//", "..", "xx", "\\\\", "++")   # one per image; colour is per mode
MARKERS = ("o", "s", "^", "D", "v", "P")         # one per mode in scatter plots
SPEEDUP_AXIS = "speed-up over eager (eager ms / compiled ms, ×; log scale)"
RATIO_FRAME = 1.6       # the speed-up frame reaches this factor past the bars (and ×1) on either side
CHANGE_FRAME = 0.4      # a change chart's frame reaches this share of the bars' span (and 0) past them on either side
CHANGE_REACH = 1.0      # ... and takes in intervals up to this share of that span past the bars (clipped beyond)
MARK_ROOM = 45          # points the frame keeps past a bar's end for its marks and its "?" (MARK_STEP * 4 away)
ARROW_SIZE = 40         # an interval's end past the frame: an arrow marker's area (points^2)
PAST_FRAME = "interval reaches past the frame"
CHANGE_AXIS = "% change (ms / {} ms − 1{}; negative is faster)"
INTERVAL = "95% interval"   # the gid of a bar's interval line
NOT_MS_RATIO = "not the ms ratio"   # the gid of the marks on change bars judged on something else
# A change bar whose % is not the ratio of the two cells' ms (verdicts.not_the_ms_ratio), by pairing: its mark at
# the bar's base and the mark's legend entry
NOT_MS_MARKS = {stats.IN_TURNS: ("⇄", "in turns: the median of the blocks' ratios, not the ms' (docs/turns.md)"),
                stats.PAIRED_BY_ROUND: ("∩", "on the rounds both cells ran (others left out), not the ms' ratio")}
JUDGED = ("speedup", "image_change", "mode_change")   # the kinds of bar with a judgement (an interval, a verdict)
LATENCY_AXIS = "mean latency (ms)"
MARK_SIZE = 60          # a flag marker's area (points^2)
MARK_STEP = 9           # points between a bar's end (or a point) and its first marker, and between markers
ERROR_STYLE = {"elinewidth": 1.0, "capsize": 2.0, "ecolor": "black"}
FAILURE_STYLE = {"fontsize": 9, "fontweight": "bold", "color": "firebrick", "va": "center", "ha": "left",
                 "clip_on": True}


@dataclass(frozen=True)
class Chart:
    title: str
    path: Path          # where the PNG was written
    relative: str       # the path relative to the report folder, for Markdown links


def write_charts(cells, out_dir, published=None, sources=None):
    """The PNGs, in report order: per device and batch size the bar charts, then per device the
    measured-vs-published chart where the images have a published source."""
    folder = Path(out_dir) / CHART_DIR
    folder.mkdir(parents=True, exist_ok=True)
    charts = []
    for device in cells.values("device"):
        for batch in cells.values("batch", device=device):
            charts += _Plot(cells, device, batch).draw_all(folder)
        if published is not None:
            charts += _published_chart(cells, device, PublishedReference(published), sources or {}, folder)
    return charts


def _save(figure, folder, name, title):
    path = folder / name
    try:
        figure.savefig(path, dpi=100, bbox_inches="tight", metadata={"Software": None})
    finally:
        plt.close(figure)
    return Chart(title, path, f"{CHART_DIR}/{path.name}")


class _Plot:
    """The bars of one device and batch size: one group per model, one bar per image and mode."""

    def __init__(self, cells, device, batch):
        self.cells, self.device, self.batch = cells, device, batch
        self.row_keys = cells.values("row", device=device, batch=batch)
        self.images = cells.values("image", device=device, batch=batch)
        self.modes = cells.values("mode", device=device, batch=batch)
        self.series = [(image, mode) for image in self.images
                       for mode in cells.values("mode", device=device, batch=batch, image=image)]
        self.name = f"{slug(device)}_bs{batch}"
        self.heading = f"{device}, batch size {batch}"

    def draw_all(self, folder):
        charts = [self.draw(folder, "duration", f"{self.heading}: latency (ms)")]
        if self.judged_series("speedup"):
            charts.append(self.draw(folder, "speedup", f"{self.heading}: speed-up over eager (×)"))
        if len(self.images) > 1:
            charts.append(self.draw_images(folder, f"{self.heading}: each mode, image against image (ms)"))
        if self.judged_series("image_change"):
            charts.append(self.draw(folder, "image_change", f"{self.heading}: % change against the previous image"))
        if self.judged_series("mode_change"):
            charts.append(self.draw(folder, "mode_change", f"{self.heading}: % change against the default mode"))
        return charts

    def judged_series(self, kind):
        """The (image, mode) series with at least one judged bar of ``kind``: a cell whose baseline
        (eager, the previous image, the default mode) also ran."""
        return [(image, mode) for image, mode in self.series
                if any(self._judgement(self._get(image, row_key, mode), kind) is not None for row_key in self.row_keys)]

    def _baseline(self, row, kind):
        """The cell ``row`` is judged against in a ``kind`` bar: the list's (matrixbench.matrix.comparisons;
        None: no such comparison)."""
        return self.cells.baseline(row, kind)

    def _judgement(self, row, kind):
        """The judgement comparisons.csv holds for ``row``'s ``kind`` bar; None when either side did not run."""
        if not is_ok(row):
            return None
        baseline = self._baseline(row, kind)
        if not is_ok(baseline):
            return None
        if kind == "speedup":
            return verdicts.judge_speedup(baseline, row)
        return verdicts.judge_cells(baseline, row)

    def _get(self, image, row_key, mode):
        return self.cells.get(self.device, image, self.batch, row_key, mode)

    def draw(self, folder, kind, title):
        series = self.series if kind == "duration" else self.judged_series(kind)
        figure, axes = plt.subplots(figsize=(9, 1.2 + 0.32 * len(self.row_keys) * len(series)))
        labels, drawn = [], []
        for index, (image, mode) in enumerate(series):
            labels += self._bars(axes, index, len(series), image, mode, kind, drawn)
        origin = 1.0 if kind == "speedup" else 0.0
        apart = {}
        if kind in JUDGED:
            _frame(axes, [(x, y, *self._interval(row, kind)) for x, y, row in drawn], kind == "speedup",
                   bool(labels))
            apart = self._not_ms_ratio(drawn, kind)
            _mark_not_ms_ratio(axes, apart, origin)
        _mark_flagged(axes, drawn, origin)
        if kind == "duration":
            _room_for_marks(axes, _flagged_ends(drawn))
        if kind in JUDGED:
            _mark_undecided(axes, [(x, y) for x, y, row in drawn if self._undecided(row, kind)], self.cells.margin_pct,
                            "speed-up" if kind == "speedup" else "change", origin)
        self._decorate(axes, title, _axis_text(kind, bool(apart)), origin)
        _place_labels(axes, labels, origin)
        return _save(figure, folder, f"{self.name}_{kind}.png", title)

    def _bars(self, axes, index, count, image, mode, kind, drawn):
        """One series' bars; failure labels returned, (value, position, row) of each bar appended
        to ``drawn`` (_mark_flagged draws the marks of those that have any)."""
        offset = (index - (count - 1) / 2) * BAR_HEIGHT / count
        positions, values, labels = [], [], []
        for position, row_key in enumerate(self.row_keys):
            row = self._get(image, row_key, mode)
            value = self._value(row, kind)
            if value is not None:
                positions.append(position + offset)
                values.append(value)
                drawn.append((value, position + offset, row))
            elif row is not None:
                labels.append((position + offset, f"{self._why_no_bar(row, kind)}: {image} {mode}"))
        ratio = kind == "speedup"   # bars from ×1 to the ratio; intervals are drawn by _frame
        axes.barh(positions, [value - 1.0 for value in values] if ratio else values, left=1.0 if ratio else None,
                  height=BAR_HEIGHT / count, label=f"{self.cells.image_labels[image]} {mode}",
                  color=f"C{self.modes.index(mode)}", edgecolor="white",
                  hatch=HATCHES[self.images.index(image) % len(HATCHES)])
        return labels

    def _interval(self, row, kind):
        """The bar's 95% interval in the chart's unit (a speed-up's ratio, a change's %); (None, None): none."""
        found = self._judgement(row, kind)
        if found.low is None or found.high is None:
            return None, None
        if kind == "speedup":
            return found.low, found.high
        return arithmetic.percent(found.low), arithmetic.percent(found.high)

    def _not_ms_ratio(self, drawn, kind):
        """{pairing: [(x, y) of each change bar judged on something other than the ms ratio that way]}
        (verdicts.not_the_ms_ratio); a speed-up's is always eager ms / compiled ms."""
        found: dict = {}
        if kind == "speedup":
            return found
        for x, y, row in drawn:
            why = verdicts.not_the_ms_ratio(self._judgement(row, kind))
            if why:
                found.setdefault(why, []).append((x, y))
        return found

    def _undecided(self, row, kind):
        return self._judgement(row, kind).verdict == stats.UNDECIDED

    def _why_no_bar(self, row, kind):
        """The label on a missing bar: the cell's status, else its baseline's ("no eager (OOM)")."""
        if not is_ok(row):
            return STATUS_TEXT.get(row["status"], row["status"])
        baseline = self._baseline(row, kind)
        name = BASELINE_OF.get(kind) or self.cells.previous_image(self.device,
                                                                                                     row["image"])
        return f"no {name} ({STATUS_TEXT.get(baseline['status'], baseline['status'])})" if baseline else f"no {name}"

    def _value(self, row, kind):
        if kind == "duration":
            return row["timing.mean_ms"] if is_ok(row) else None
        found = self._judgement(row, kind)
        if found is None:
            return None
        return found.ratio if kind == "speedup" else verdicts.percent(found)

    def _decorate(self, axes, title, axis_text, origin=0.0):
        axes.set_yticks(range(len(self.row_keys)), self._row_labels())
        axes.invert_yaxis()
        axes.set_xlabel(axis_text)
        axes.axvline(origin, color="black", linewidth=0.6)
        axes.set_title(title)
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        axes.grid(axis="x", alpha=0.3)

    def _row_labels(self):
        return [row_label(self.cells.select(device=self.device, batch=self.batch, row=key)[0])
                for key in self.row_keys]

    def draw_images(self, folder, title):
        """One panel per mode; in each, per model, one bar per image: the torch-version question."""
        size = (3.2 * len(self.modes) + 2.5, 1.2 + 0.3 * len(self.row_keys) * len(self.images))
        figure, panels = plt.subplots(1, len(self.modes), sharey=True, squeeze=False, figsize=size)
        panels_drawn = []
        for mode, axes in zip(self.modes, panels[0]):
            labels, drawn = [], []
            for index, image in enumerate(self.images):
                labels += self._image_bars(axes, index, image, mode, drawn)
            _mark_flagged(axes, drawn)
            panels_drawn.append((axes, drawn))
            axes.set_title(mode, fontsize=10)
            axes.set_xlabel(LATENCY_AXIS, fontsize=8)
            axes.grid(axis="x", alpha=0.3)
            _place_labels(axes, labels)
        panels[0][0].set_yticks(range(len(self.row_keys)), self._row_labels())
        panels[0][0].invert_yaxis()
        handles, names = _legend_entries(panels[0])
        figure.legend(handles, names, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 0.95))
        figure.suptitle(title)
        figure.tight_layout()
        for axes, drawn in panels_drawn:
            _room_for_marks(axes, _flagged_ends(drawn))
        return _save(figure, folder, f"{self.name}_images.png", title)

    def _image_bars(self, axes, index, image, mode, drawn):
        count = len(self.images)
        offset = (index - (count - 1) / 2) * BAR_HEIGHT / count
        positions, values, labels = [], [], []
        for position, row_key in enumerate(self.row_keys):
            row = self._get(image, row_key, mode)
            if is_ok(row):
                positions.append(position + offset)
                values.append(row["timing.mean_ms"])
                drawn.append((row["timing.mean_ms"], position + offset, row))
            elif row is not None:
                labels.append((position + offset, f"{STATUS_TEXT.get(row['status'], row['status'])}: {image}"))
        axes.barh(positions, values, height=BAR_HEIGHT / count, label=self.cells.image_labels[image],
                  color=f"C{index}", edgecolor="white")
        return labels


def _frame(axes, bars, log, room_for_labels=False):
    """A judged chart's frame from its bars (x, y, low, high), not from their intervals: it spans the bars and the
    origin (×1 on the speed-up's log axis, 0 on a change's %), RATIO_FRAME (log) or CHANGE_FRAME of that span
    (linear) past them, and at least MARK_ROOM points (a bar's marks and "?" stay inside); a change chart's frame
    also takes in the intervals, up to CHANGE_REACH of the span past the bars. Each bar's 95% interval (low, high;
    None: none) is a line clipped at the frame, with a cap at each end inside it and an arrow at the edge where it
    reaches past (one legend entry)."""
    ends = [] if log else [end for _, _, start, stop in bars for end in (start, stop) if end is not None]
    low, high = _frame_limits([x for x, _, _, _ in bars], log, _points_wide(axes), ends)
    if log:
        axes.set_xscale("log")
        high *= 2.0 if room_for_labels else 1.0
        axes.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"×{value:g}"))
        axes.xaxis.set_minor_formatter(NullFormatter())
    axes.set_xlim(low, high)
    past = {"<": [], ">": []}
    for _, y, start, end in bars:
        if start is None or end is None:
            continue
        shown = max(start, low), min(end, high)
        axes.plot(shown, [y, y], color=ERROR_STYLE["ecolor"], linewidth=ERROR_STYLE["elinewidth"], zorder=2.5,
                  gid=INTERVAL)
        for value, clipped, side in ((start, shown[0], "<"), (end, shown[1], ">")):
            if value == clipped:
                axes.plot([value], [y], marker="|", markersize=2 * ERROR_STYLE["capsize"],
                          color=ERROR_STYLE["ecolor"], zorder=2.5)
            else:
                past[side].append((clipped, y))
    labelled = False
    for side, points in past.items():
        if points:
            axes.scatter([x for x, _ in points], [y for _, y in points], s=ARROW_SIZE, marker=side,
                         color=ERROR_STYLE["ecolor"], zorder=3, clip_on=False, gid=PAST_FRAME,
                         label="_nolegend_" if labelled else PAST_FRAME)
            labelled = True


def _points_wide(axes):
    """The axes' width in points (its figure's layout, before savefig's tight box, which crops only)."""
    return axes.get_window_extent().width * 72.0 / axes.figure.dpi


def _frame_limits(values, log, width_points, reach=()):
    """(low, high) of a frame around ``values`` and the origin (1 on a log axis, 0 else): RATIO_FRAME times past
    them (log) or CHANGE_FRAME of their span (linear), and at least MARK_ROOM of ``width_points`` each side; widened
    to take in the values of ``reach`` (interval ends) up to CHANGE_REACH of the span past ``values``."""
    scale = (lambda value: math.log(value)) if log else (lambda value: value)
    found = [scale(value) for value in values] + [0.0]
    low, high = min(found), max(found)
    span = (high - low) or (math.log(RATIO_FRAME) if log else 1.0)
    share = min(MARK_ROOM / width_points, 0.45)
    pad = max(math.log(RATIO_FRAME) if log else CHANGE_FRAME * span, share * span / (1.0 - 2.0 * share))
    ends = [scale(value) for value in reach]
    low, high = (min([low - pad] + [max(end, low - CHANGE_REACH * span) for end in ends]),
                 max([high + pad] + [min(end, high + CHANGE_REACH * span) for end in ends]))
    return (math.exp(low), math.exp(high)) if log else (low, high)


def _mark_flagged(axes, points, origin=0.0):
    """The tables' marks of each (x, y, row) that has any, as markers to the right of x (to the
    left for a bar below ``origin``), one after another; one legend entry per mark."""
    placed = {}
    for x, y, row in points:
        for index, mark in enumerate(marks_of(row)):
            placed.setdefault((mark, index, x < origin), []).append((x, y))
    labelled = set()
    for (mark, index, negative), found in placed.items():
        shift = offset_copy(axes.transData, fig=axes.figure, units="points",
                            x=(-1 if negative else 1) * MARK_STEP * (index + 1), y=0)
        label = mark[1] if mark not in labelled else "_nolegend_"
        labelled.add(mark)
        axes.scatter([x for x, _ in found], [y for _, y in found], s=MARK_SIZE, marker=f"${mark[0]}$",
                     color="black", linewidths=0, transform=shift, label=label, zorder=3)


def _room_for_marks(axes, ends):
    """Widen a bar chart's right edge so that the marks drawn after each bar's end stay inside it (``ends``: (x, how
    many marks) per bar, each MARK_STEP points past the last): matplotlib's default margin (5% of the span) is
    narrower than a long bar's two or three marks, which the axes then clipped while the legend still named them.
    The judged charts get this room from _frame."""
    low, high = axes.get_xlim()
    width = _points_wide(axes)
    needed = high
    for x, count in ends:
        room = MARK_STEP * count + MARK_SIZE ** 0.5 / 2   # the last mark's centre and its radius
        if count and x > low:
            needed = max(needed, low + (x - low) * width / max(width - room, 1.0))
    if needed > high:
        axes.set_xlim(low, needed)


def _flagged_ends(points):
    """(x, how many marks) of each (x, y, row) bar that _mark_flagged marks."""
    return [(x, len(marks_of(row))) for x, _, row in points]


def _axis_text(kind, marked=False):
    """The x axis' label; ``marked``: some change bars are not the ms ratio (_mark_not_ms_ratio marks them)."""
    if kind == "duration":
        return LATENCY_AXIS
    if kind == "speedup":
        return SPEEDUP_AXIS
    return CHANGE_AXIS.format("previous image's" if kind == "image_change" else "default mode's",
                              " unless marked" if marked else "")


def _mark_not_ms_ratio(axes, found, origin=0.0):
    """A mark at the base of each change bar judged on something other than the ms ratio ({pairing: [(x, y)]}:
    NOT_MS_MARKS), beside the origin on the side away from the bar, one legend entry per pairing."""
    for pairing, points in found.items():
        mark, text = NOT_MS_MARKS[pairing]
        label = text
        for negative in (False, True):
            chosen = [y for x, y in points if (x < origin) == negative]
            if not chosen:
                continue
            shift = offset_copy(axes.transData, fig=axes.figure, units="points", x=(1 if negative else -1) * MARK_STEP,
                                y=0)
            axes.scatter([origin] * len(chosen), chosen, s=MARK_SIZE, marker=f"${mark}$", color="black",
                         linewidths=0, transform=shift, label=label, zorder=3, gid=NOT_MS_RATIO)
            label = "_nolegend_"


def _mark_undecided(axes, points, margin_pct, what, origin=0.0):
    """A "?" beside each undecided bar (right of its end, left for one below ``origin``); ``what`` names
    the bar's quantity in the legend ("speed-up", "change")."""
    label = f"undecided: the interval holds no {what} and reaches past ±{margin_pct:g}%"
    for negative in (False, True):
        found = [(x, y) for x, y in points if (x < origin) == negative]
        if not found:
            continue
        shift = offset_copy(axes.transData, fig=axes.figure, units="points", x=(-1 if negative else 1) * MARK_STEP * 4,
                            y=0)
        axes.scatter([x for x, _ in found], [y for _, y in found], s=MARK_SIZE, marker=f"${verdicts.UNDECIDED_MARK}$",
                     color="firebrick", linewidths=0, transform=shift, label=label, zorder=3)
        label = "_nolegend_"


def _legend_entries(axes_list):
    """The legend handles and names of several panels, each name once, in first-seen order."""
    entries = {}
    for axes in axes_list:
        for handle, name in zip(*axes.get_legend_handles_labels()):
            entries.setdefault(name, handle)
    return list(entries.values()), list(entries)


def _place_labels(axes, labels, origin=0.0):
    """Failure labels inside the plot area, beside the bars' zero on the missing bar: to its right,
    or to its left where the bars are mostly negative (a change chart: faster). On the speed-up's log
    axis (``origin`` ×1, its frame already widened by _frame) just right of ×1."""
    if not labels:
        return
    if origin:
        for position, text in labels:
            axes.text(origin * 1.02, position, text, **FAILURE_STYLE)
        return
    low, high = axes.get_xlim()
    low, high = min(low, 0.0), max(high, 0.0)
    span = (high - low) or 1.0
    side = -1 if -low > high else 1
    # room for the text when every bar is short
    axes.set_xlim(*((low - 0.25 * span, high + 0.02 * span) if side < 0 else (low, high + 0.25 * span)))
    for position, text in labels:
        axes.text(side * 0.01 * span, position, text, **{**FAILURE_STYLE, "ha": "right" if side < 0 else "left"})


# ---- measured against published -----------------------------------------------------------

def _published_chart(cells, device, reference, sources, folder):
    points = _published_points(cells, device, reference, sources)
    if not points:
        return []
    gpu = cells.select(device=device)[0]["published_gpu"]
    panels = [gpu] if gpu else [name for name in GPUS if any(point["gpu"] == name for point in points)]
    figure, axes_list = plt.subplots(1, len(panels), squeeze=False, figsize=(4.6 * len(panels) + 2.5, 4.6))
    for name, axes in zip(panels, axes_list[0]):
        _scatter(axes, [point for point in points if point["gpu"] == name], cells, ms=bool(gpu))
        axes.set_title(f"published {name}", fontsize=10)
    handles, names = _legend_entries(axes_list[0])
    figure.legend(handles, names, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 0.9))
    kind = "latency (ms)" if gpu else "speed-up (eager ms / compiled ms)"
    title = f"{device}: measured against published {kind}, one point per cell"
    found = {point["image"]: point["source"] for point in points}
    used = {image: found[image] for image in cells.images() if image in found}
    against = "; ".join(f"{image} against the {source_title(source)}" for image, source in used.items())
    figure.suptitle(f"{title}\n{against}", fontsize=9)
    figure.tight_layout()
    return [_save(figure, folder, f"{slug(device)}_published.png", title)]


def _published_points(cells, device, reference, sources):
    """One point per measured cell with a published counterpart: (published, measured) values."""
    points = []
    gpu = None
    for row in cells.select(device=device):
        source = sources.get(row["image"], "none")
        if not is_ok(row) or not reference.comparable(row, source):
            continue
        gpu = row["published_gpu"]
        for name in [gpu] if gpu else GPUS:
            value = _published_value(cells, reference, row, source, name, ms=bool(gpu))
            if value is not None:
                points.append({"gpu": name, "image": row["image"], "mode": row["mode_label"], "source": source,
                               "published": value[0], "measured": value[1], "row": row})
    return points


def _published_value(cells, reference, row, source, gpu, ms):
    batch, model, mode = row["cell.batch_size"], row["cell.model"], row["cell.mode"]
    if ms:
        number = reference.number(source, gpu, batch, model, mode)
        ok = number is not None and number["status"] == "ok"
        return (number["latency_ms"], row["timing.mean_ms"]) if ok else None
    published = reference.speedup(source, gpu, batch, model, mode) if compiled(mode) else None
    eager = cells.speedup_baseline(row)
    if published is None or not is_ok(eager):
        return None
    return published, verdicts.judge_speedup(eager, row).ratio


def _scatter(axes, points, cells, ms):
    images = [image for image in cells.images() if any(point["image"] == image for point in points)]
    modes = sorted({point["mode"] for point in points}, key=mode_rank)
    for image_index, image in enumerate(images):
        for mode_index, mode in enumerate(modes):
            chosen = [point for point in points if point["image"] == image and point["mode"] == mode]
            if chosen:
                axes.scatter([p["published"] for p in chosen], [p["measured"] for p in chosen], s=28,
                             color=f"C{image_index}", marker=MARKERS[mode_index % len(MARKERS)],
                             label=f"{cells.image_labels[image]} {mode}")
    _mark_flagged(axes, [(point["published"], point["measured"], point["row"]) for point in points])
    values = [value for point in points for value in (point["published"], point["measured"])]
    low, high = min(values) * 0.8, max(values) * 1.25
    axes.plot([low, high], [low, high], color="grey", linewidth=0.8, linestyle="--", label="y = x")
    if ms:
        axes.set_xscale("log")
        axes.set_yscale("log")
    axes.set_xlim(low, high)
    axes.set_ylim(low, high)
    unit = "latency (ms)" if ms else "speed-up (eager ms / compiled ms)"
    axes.set_xlabel(f"published {unit}", fontsize=8)
    axes.set_ylabel(f"measured {unit}", fontsize=8)
    axes.grid(alpha=0.3)
