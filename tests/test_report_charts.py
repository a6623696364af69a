"""What the charts draw, read from matplotlib's artists (not pixels): flagged cells carry the
tables' marks as markers beside their bar or point, each mark with a legend entry."""
import json
import shutil
from pathlib import Path

import pytest

from matrixbench.report import build_report, charts
from matrixbench.report.tables import FLAGS

FIXTURES = Path(__file__).parent / "fixtures"
FLAGGED = ("stable", "vit_bs1_default_float32.json")   # gpu-run, NVIDIA A100-SXM4-40GB
NOISY = ("nightly", "resnet_bs1_eager_float32.json")   # noisy in the fixture as made
CHART = "nvidia-a100-sxm4-40gb_bs1_{}.png"
MARK_NAMES = ("noisy within a process", "noisy between processes", "accuracy check failed", *FLAGS)


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """{chart file name: its matplotlib Figure} of gpu-run's report, one cell flagged."""
    root = tmp_path_factory.mktemp("charts")
    run = Path(shutil.copytree(FIXTURES / "gpu-run", root / "gpu-run"))
    path = run.joinpath(*FLAGGED)
    record = json.loads(path.read_text())
    record["timing"]["flags"] = ["no_cudagraphs", "throttled"]
    path.write_text(json.dumps(record))
    figures = {}
    real = charts._save
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(charts, "_save", lambda figure, folder, name, title: (
            figures.setdefault(name, figure), real(figure, folder, name, title))[1])
        build_report([run], root / "out", ["md"])
    return figures, record


def _mean(image, name):
    return json.loads((FIXTURES / "gpu-run" / image / name).read_text())["timing"]["mean_ms"]


def _legend_texts(figure):
    legends = [axes.get_legend() for axes in figure.axes if axes.get_legend()] + list(figure.legends)
    return [text.get_text() for legend in legends for text in legend.get_texts()]


def _labelled(figure, label):
    return [point for axes in figure.axes for collection in axes.collections if collection.get_label() == label
            for point in collection.get_offsets().tolist()]


def test_a_flagged_bar_carries_its_marks_at_its_end_with_legend_entries(drawn):
    figures, record = drawn
    duration = figures[CHART.format("duration")]
    mean = record["timing"]["mean_ms"]
    assert len(_labelled(duration, "no_cudagraphs")) == len(_labelled(duration, "throttled")) == 1
    [(x, _)] = _labelled(duration, "no_cudagraphs")
    assert x == pytest.approx(mean)
    assert {"no_cudagraphs", "throttled", "noisy within a process"} <= set(_legend_texts(duration))
    [(x, _)] = _labelled(duration, "noisy within a process")
    assert x == pytest.approx(_mean(*NOISY))


def test_the_speedup_chart_marks_the_flagged_cell_at_its_speedup(drawn):
    figures, record = drawn
    speedup = figures[CHART.format("speedup")]
    eager = _mean("stable", "vit_bs1_eager_float32.json")
    [(x, _)] = _labelled(speedup, "no_cudagraphs")
    assert x == pytest.approx(eager / record["timing"]["mean_ms"])   # a ratio (×) on the log axis
    assert "noisy within a process" not in _legend_texts(speedup)   # the noisy cell is an eager one


def test_image_against_image_and_published_charts_mark_it_too(drawn):
    figures, record = drawn
    images = figures[CHART.format("images")]
    assert [x for x, _ in _labelled(images, "no_cudagraphs")] == pytest.approx([record["timing"]["mean_ms"]])
    assert "throttled" in _legend_texts(images)
    published = figures["nvidia-a100-sxm4-40gb_published.png"]
    assert [y for _, y in _labelled(published, "throttled")] == pytest.approx([record["timing"]["mean_ms"]])
    assert "no_cudagraphs" in _legend_texts(published)


def test_only_flagged_cells_get_marks(drawn):
    figures, _ = drawn
    bs4 = figures[CHART.format("duration").replace("bs1", "bs4")]
    records = [json.loads(path.read_text()) for path in (FIXTURES / "gpu-run").rglob("*_bs4_*.json")]
    failed = [record["timing"]["mean_ms"] for record in records
              if record["status"] == "ok" and record["accuracy"]["status"] in ("fail", "nan")]
    assert failed and not any(record["timing"]["noisy"] for record in records if record["timing"])
    assert [text for text in _legend_texts(bs4) if text in MARK_NAMES] == ["accuracy check failed"]
    assert sorted(x for x, _ in _labelled(bs4, "accuracy check failed")) == pytest.approx(sorted(failed))
