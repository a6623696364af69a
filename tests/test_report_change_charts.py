"""The image-against-image and mode-against-mode change charts, read from matplotlib's artists
(not pixels): each bar's interval line is the 95% interval comparisons.csv holds for that comparison
(clipped at a frame the bars set, an arrow where it reaches past), an undecided comparison carries the
"?" mark inside the axes, and a change not judged on the ms ratio (in turns) is marked as such.

Hand-made records: two images (``base`` torch 2.0.1, ``new`` torch 2.1.0), two models, three modes
(eager, default, max-autotune), three processes per cell with the planted means below. Exactly one
image change (new vit default: 7, 9, 8 ms against 8 ms) and one mode change (base resnet
max-autotune: 3.5, 4.5, 4.0 ms against 4 ms) are planted undecided; every other pair is tight.
"""
import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from host_helpers import report_with_figures
from matrixbench.report import charts
from test_report_verdict_rows import _record

MEANS = {
    ("base", "vit", "eager"): [10.0, 10.1, 9.9], ("base", "vit", "default"): [8.0, 8.1, 7.9],
    ("base", "vit", "max-autotune"): [6.0, 6.02, 5.98],
    ("base", "resnet", "eager"): [5.0, 5.01, 4.99], ("base", "resnet", "default"): [4.0, 4.02, 3.98],
    ("base", "resnet", "max-autotune"): [3.5, 4.5, 4.0],
    ("new", "vit", "eager"): [9.0, 9.05, 8.95], ("new", "vit", "default"): [7.0, 9.0, 8.0],
    ("new", "vit", "max-autotune"): [5.0, 5.02, 4.98],
    ("new", "resnet", "eager"): [5.0, 5.005, 4.995], ("new", "resnet", "default"): [3.0, 3.01, 2.99],
    ("new", "resnet", "max-autotune"): [2.5, 2.51, 2.49],
}
CHART = "cpu-hand-made_bs1_{}.png"
UNDECIDED = {"image_change": ("new", "vit", "default"), "mode_change": ("base", "resnet", "max-autotune")}


def _build(root, images=("base", "new"), modes=("eager", "default", "max-autotune"), planted=None):
    """(comparisons.csv as a DataFrame, {chart file name: its matplotlib Figure}) of the planted
    cells of ``images`` and ``modes`` (``planted``: MEANS with these cells' means replaced)."""
    run = root / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "images": list(images)}))
    for (image, model, mode), means in {**MEANS, **(planted or {})}.items():
        if image in images and mode in modes:
            (run / image).mkdir(exist_ok=True)
            for repeat, mean in enumerate(means):
                path = run / image / f"{model}_bs1_{mode}_float32.r{repeat}.json"
                path.write_text(json.dumps(_record(image, model, mode, repeat, mean)))
    figures = report_with_figures([run], root / "out")
    return pd.read_csv(root / "out" / "comparisons.csv"), figures


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("change-charts"))


def _error_spans(axes):
    """(low, high) of every bar's interval line on ``axes`` (clipped at the frame), sorted."""
    return sorted((min(line.get_xdata()), max(line.get_xdata())) for line in axes.lines
                  if line.get_gid() == charts.INTERVAL)


def _undecided_marks(axes):
    """The x of every "?" marker on ``axes`` (their collections share the undecided legend entry's
    colour; the first one carries the entry)."""
    first = [found for found in axes.collections if found.get_label().startswith("undecided")]
    assert len(first) == 1, "one legend entry for the undecided mark"
    colour = first[0].get_facecolor().tolist()
    return sorted(x for found in axes.collections if found.get_facecolor().tolist() == colour
                  for x, _ in found.get_offsets().tolist())


@pytest.mark.parametrize("kind", ["image_change", "mode_change"])
def test_each_change_bar_carries_the_interval_comparisons_csv_holds(built, kind):
    frame, figures = built
    axes = figures[CHART.format(kind)].axes[0]
    rows = frame.query(f"kind == '{kind}'")
    assert len(rows) == (6 if kind == "image_change" else 4)     # 2 models x 3 modes; 2 images x 2 models
    assert (rows["candidate_processes"] == 3).all() and rows[["low_pct", "high_pct"]].notna().all().all()
    assert np.asarray(_error_spans(axes)) == pytest.approx(np.asarray(sorted(zip(rows["low_pct"], rows["high_pct"]))))
    widths = sorted(patch.get_width() for container in axes.containers for patch in container.patches)
    assert widths == pytest.approx(sorted(rows["percent"]))


@pytest.mark.parametrize("kind", ["image_change", "mode_change"])
def test_the_undecided_change_and_only_it_carries_the_mark(built, kind):
    frame, figures = built
    rows = frame.query(f"kind == '{kind}'")
    image, model, mode = UNDECIDED[kind]
    undecided = rows.query("verdict == 'undecided'")
    assert list(zip(undecided["image"], undecided["model"], undecided["mode"])) == [(image, model, mode)]
    assert _undecided_marks(figures[CHART.format(kind)].axes[0]) == pytest.approx(list(undecided["percent"]))


def test_the_csv_bounds_the_bars_show_are_the_log_process_means_paired_by_round(built):
    """Both images ran in rounds 0-2 of one run: the image change is judged paired by round (issue 34), the
    interval scipy's paired t on the rounds' log ratios."""
    row = built[0].query("kind == 'image_change' and model == 'vit' and mode == 'default'").iloc[0]
    base, new = MEANS[("base", "vit", "default")], MEANS[("new", "vit", "default")]
    assert row["pairing"] == "paired by round"
    low, high = np.exp(scipy_stats.ttest_rel(np.log(new), np.log(base)).confidence_interval(0.95))
    assert (row["low_pct"], row["high_pct"]) == pytest.approx(((low - 1) * 100, (high - 1) * 100))


def test_no_change_chart_without_a_second_image_or_a_third_mode(tmp_path):
    _, figures = _build(tmp_path, images=("base",), modes=("eager", "default"))
    assert {CHART.format("duration"), CHART.format("speedup")} <= set(figures)
    assert not {name for name in figures if "change" in name}


# --- one huge interval: the frame is the bars', the interval clipped with an arrow -------------------------

# new resnet max-autotune's three rounds spread over three decades: its image change (against base) and its mode
# change (against new default) are undecided with intervals from about -100% to beyond +100,000%
WILD = {("new", "resnet", "max-autotune"): [0.05, 2.5, 100.0]}


@pytest.fixture(scope="module")
def wild(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("wild-change-charts"), planted=WILD)


@pytest.mark.parametrize("kind", ["image_change", "mode_change"])
def test_a_huge_interval_is_clipped_at_a_frame_the_bars_set_and_ends_in_an_arrow(wild, kind):
    frame, figures = wild
    axes = figures[CHART.format(kind)].axes[0]
    rows = frame.query(f"kind == '{kind}'")
    assert rows["high_pct"].max() > 1e5                                    # the planted interval
    bars = list(rows["percent"]) + [0.0]
    span = max(bars) - min(bars)
    low, high = axes.get_xlim()
    assert min(bars) - span <= low < min(bars) and max(bars) < high <= max(bars) + span   # the bars set the frame
    arrows = [point for collection in axes.collections if collection.get_gid() == charts.PAST_FRAME
              for point in collection.get_offsets().tolist()]
    ends = int((rows["high_pct"] > high).sum() + (rows["low_pct"] < low).sum())
    assert ends >= 1 and len(arrows) == ends
    assert all(x == pytest.approx(high) or x == pytest.approx(low) for x, _ in arrows)
    assert charts.PAST_FRAME in axes.get_legend_handles_labels()[1]
    assert all(low - 1e-9 <= x <= high + 1e-9 for span_ in _error_spans(axes) for x in span_)


@pytest.mark.parametrize("kind", ["image_change", "mode_change"])
def test_every_undecided_mark_stays_inside_the_axes(wild, kind):
    frame, figures = wild
    axes = figures[CHART.format(kind)].axes[0]
    assert len(frame.query(f"kind == '{kind}' and verdict == 'undecided'")) >= 2
    marks = [found for found in axes.collections if found.get_facecolor().tolist()
             == [found_ for found_ in axes.collections if found_.get_label().startswith("undecided")][0]
             .get_facecolor().tolist()]
    box = axes.get_window_extent()
    radius = (charts.MARK_SIZE ** 0.5) / 2 * axes.figure.dpi / 72
    placed = [x for found in marks for x, _ in found.get_offset_transform().transform(found.get_offsets())]
    assert len(placed) == len(frame.query(f"kind == '{kind}' and verdict == 'undecided'"))
    assert all(box.x0 + radius <= x <= box.x1 - radius for x in placed)


# --- a change judged in turns: the chart says its bar is not the ms ratio -----------------------------------

@pytest.fixture(scope="module")
def in_turns(tmp_path_factory):
    """(comparisons.csv, the image change chart's Figure) of tests/test_report_turns.py's records: ViT and ResNet
    eager judged in turns, ViT and ResNet default paired by round on every round (the ms ratio)."""
    import test_report_turns as turns

    root = tmp_path_factory.mktemp("turns-chart")
    run = root / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "images": ["old", "new"]}))
    for name, sides in turns.TURNS.items():
        for image, rounds in sides.items():
            (run / image).mkdir(exist_ok=True)
            for repeat, blocks in enumerate(rounds):
                record = turns._record(name, image, repeat, blocks)
                (run / image / f"{name}.r{repeat}.json").write_text(json.dumps(record))
    figures = report_with_figures([run], root / "out")
    image_change = next(figure for name, figure in figures.items() if name.endswith("_image_change.png"))
    return pd.read_csv(root / "out" / "comparisons.csv"), image_change


def test_a_change_in_turns_is_marked_and_the_axis_does_not_call_it_the_ms_ratio(in_turns):
    frame, figure = in_turns
    axes = figure.axes[0]
    rows = frame.query("kind == 'image_change'")
    assert sorted(rows["pairing"]) == ["in turns", "in turns", "paired by round", "paired by round"]
    label = axes.get_xlabel()
    assert "unless marked" in label, label      # "ms / previous image's ms - 1" is not what every bar is
    legend = axes.get_legend_handles_labels()[1]
    assert any(text.startswith("in turns") for text in legend), legend
    bars = {round(patch.get_width(), 9): patch.get_y() + patch.get_height() / 2
            for container in axes.containers for patch in container.patches}
    marked = sorted(y for found in axes.collections if found.get_gid() == charts.NOT_MS_RATIO
                    for _, y in found.get_offsets().tolist())
    in_turns_bars = sorted(bars[round(value, 9)] for value in rows.query("pairing == 'in turns'")["percent"])
    assert marked == pytest.approx(in_turns_bars)     # the two bars in turns, and no other
