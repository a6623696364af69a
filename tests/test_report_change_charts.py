"""The image-against-image and mode-against-mode change charts, read from matplotlib's artists
(not pixels): each bar's error bar is the 95% interval comparisons.csv holds for that comparison,
and an undecided comparison carries the "?" mark.

Hand-made records: two images (``base`` torch 2.0.1, ``new`` torch 2.1.0), two models, three modes
(eager, default, max-autotune), three processes per cell with the planted means below. Exactly one
image change (new vit default: 7, 9, 8 ms against 8 ms) and one mode change (base resnet
max-autotune: 3.5, 4.5, 4.0 ms against 4 ms) are planted undecided; every other pair is tight.
"""
import json

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer
from scipy import stats as scipy_stats

from matrixbench.report import build_report, charts
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


def _build(root, images=("base", "new"), modes=("eager", "default", "max-autotune")):
    """(comparisons.csv as a DataFrame, {chart file name: its matplotlib Figure}) of the planted
    cells of ``images`` and ``modes``."""
    run = root / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "images": list(images)}))
    for (image, model, mode), means in MEANS.items():
        if image in images and mode in modes:
            (run / image).mkdir(exist_ok=True)
            for repeat, mean in enumerate(means):
                path = run / image / f"{model}_bs1_{mode}_float32.r{repeat}.json"
                path.write_text(json.dumps(_record(image, model, mode, repeat, mean)))
    figures = {}
    real = charts._save
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(charts, "_save", lambda figure, folder, name, title: (
            figures.setdefault(name, figure), real(figure, folder, name, title))[1])
        build_report([run], root / "out", ["md", "csv"])
    return pd.read_csv(root / "out" / "comparisons.csv"), figures


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("change-charts"))


def _error_spans(axes):
    """(low, high) of every error bar on ``axes``, sorted."""
    bars = [container for container in axes.containers if isinstance(container, ErrorbarContainer)]
    return sorted((segment[:, 0].min(), segment[:, 0].max())
                  for container in bars for segment in container.lines[2][0].get_segments())


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
    widths = sorted(patch.get_width() for container in axes.containers if not isinstance(container, ErrorbarContainer)
                    for patch in container.patches)
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
