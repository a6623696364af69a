"""Every comparison row's verdict, and the A/A false-alarm line, from hand-made records + run.json.

Three images: ``base`` (torch 2.0.1), ``base-aa`` (the same image under a second name, as
``run --aa base`` writes it: run.json's top-level ``aa_twins`` maps it to ``base``) and ``new``
(torch 2.1.0). Each cell ran in three processes with the planted means below (samples spread
0.5% around each). The A/A pairs are planted so that exactly one of four is a clear difference:
the report must print "1 of 4". The expected intervals come from scipy's Welch test on the logs
of the planted means, not from the report's code.
"""
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from host_helpers import synthetic_record
from matrixbench.report import build_report, charts
from runner.cells_file import cells_file_from_dict
from runner.core import Status
from runner.timing import summarize

AA_RATE = r"\(a simulator of known truth stars [\d.]+% of them at \d+ vs \d+ processes paired by round; nominal 5%\)"
FIXTURES = Path(__file__).parent / "fixtures"
TORCH = {"base": "2.0.1", "base-aa": "2.0.1", "new": "2.1.0"}
# (image, model, mode) -> the mean of each process
MEANS = {
    ("base", "vit", "eager"): [10.0, 10.1, 9.9], ("base", "vit", "default"): [8.0, 8.1, 7.9],
    ("base", "resnet", "eager"): [5.0, 5.01, 4.99], ("base", "resnet", "default"): [4.0, 4.1, 3.9],
    ("base-aa", "vit", "eager"): [10.05, 9.95, 10.0], ("base-aa", "vit", "default"): [8.05, 7.95, 8.0],
    ("base-aa", "resnet", "eager"): [5.02, 4.98, 5.0], ("base-aa", "resnet", "default"): [4.6, 4.62, 4.58],
    ("new", "vit", "eager"): [9.0, 9.1, 8.9], ("new", "vit", "default"): [7.0, 9.0, 8.0],
    ("new", "resnet", "eager"): [5.0, 5.005, 4.995], ("new", "resnet", "default"): [4.0, 4.02, 3.98],
}


def _record(image, model, mode, repeat, mean):
    cell = {"model": model, "task": "image-classification", "weights": "random", "size": "full",
            "batch_size": 1, "mode": mode, "fullgraph": False, "dtype": "float32"}
    plan = cells_file_from_dict({"settings": {"iterations": 50}, "cells": [cell]})
    environment = {"python": "3.10", "torch": TORCH[image], "torch_git": None, "transformers": "4.43.4",
                   "cuda": None, "cudnn": None, "gpu_name": None, "gpu_count": 0, "driver": None,
                   "cpu_model": "hand-made", "threads": 1, "platform": "hand-made", "hostname": "hand-made",
                   "image_name": image, "image_id": None}
    record = synthetic_record(plan, "cpu", environment)
    samples = [mean * 0.995, mean * 1.005] * 25
    record.status, record.duration_s = Status.OK, 1.0
    record.memory = {"peak_bytes": 1, "kind": "cpu_max_rss"}
    record.accuracy = ({"max_abs_diff": None, "tolerance": None, "status": "skipped"} if mode == "eager"
                       else {"max_abs_diff": 0.0, "tolerance": 0.01, "status": "pass"})
    if mode != "eager":
        record.dynamo = {"graphs": 1, "graph_breaks": 0, "recompiles": 0, "cudagraph_skips": 0, "break_reasons": []}
    record.timing = {"load_s": 1.0, "first_call_s": 1.0, "warmup_s": 1.0, "timer": "perf_counter",
                     **summarize(samples, 0.1)}
    return {**record.to_dict(), "repeat": repeat}


def _write_run(run, twins, margin_pct=None):
    run.mkdir(parents=True)
    manifest = {"schema_version": 1, "images": ["base", "base-aa", "new"]}
    if margin_pct is not None:
        manifest["matrix"] = {"margin_pct": margin_pct}
    if twins:
        manifest["aa_twins"] = {"base-aa": "base"}
    (run / "run.json").write_text(json.dumps(manifest))
    for (image, model, mode), means in MEANS.items():
        (run / image).mkdir(exist_ok=True)
        for repeat, mean in enumerate(means):
            path = run / image / f"{model}_bs1_{mode}_float32.r{repeat}.json"
            path.write_text(json.dumps(_record(image, model, mode, repeat, mean)))


def _build(root, twins, margin_pct=None):
    """(comparisons.csv, report.md, {chart file name: its matplotlib Figure})."""
    _write_run(root / "run", twins, margin_pct)
    figures = {}
    real = charts._save
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(charts, "_save", lambda figure, folder, name, title: (
            figures.setdefault(name, figure), real(figure, folder, name, title))[1])
        build_report([root / "run"], root / "out", ["md", "html", "csv"])
    html = (root / "out" / "report.html").read_text(encoding="utf-8")
    assert ("On this machine" in html) == twins and "<h3>Verdicts</h3>" in html
    return (pd.read_csv(root / "out" / "comparisons.csv"), (root / "out" / "report.md").read_text(encoding="utf-8"),
            figures)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("aa"), twins=True)


def _welch_ratio_interval(baseline, candidate):
    """scipy's Welch test, with one df fewer, at least n_small - 1 (stats.WELCH_DF_LESS, as the report judges)."""
    result = scipy_stats.ttest_ind(np.log(candidate), np.log(baseline), equal_var=False)
    low, high = result.confidence_interval(0.95)
    estimate, error = (low + high) / 2, (high - low) / 2 / scipy_stats.t.ppf(0.975, result.df)
    df = max(result.df - 1.0, min(len(baseline), len(candidate)) - 1)
    half = scipy_stats.t.ppf(0.975, df) * error
    return float(np.exp(estimate - half)), float(np.exp(estimate + half))


def _paired_ratio_interval(baseline, candidate):
    """Issue 34: two images' cells of one run with the same rounds are judged paired by round: Student's t
    on the rounds' log ratios (scipy's paired test), not Welch's."""
    result = scipy_stats.ttest_rel(np.log(candidate), np.log(baseline))
    return tuple(np.exp(result.confidence_interval(0.95)))


def test_the_false_alarm_line_counts_starred_aa_comparisons(built):
    frame, markdown, _ = built
    aa = frame.query("kind == 'aa_change'")
    assert len(aa) == 4 and set(aa["image"]) == {"base-aa"} and set(aa["against"]) == {"base"}
    starred = aa[aa["verdict"].isin(["faster", "slower"])]
    assert list(zip(starred["model"], starred["mode"])) == [("resnet", "default")]
    assert re.search(r"On this machine, 1 of 4 no-change \(A/A\) comparisons was starred " + AA_RATE + r"\.", markdown)
    assert "| CPU (hand-made) | A/A: one image under two names | 0 | 1 |" in markdown    # the verdicts table
    # issue 34: what chance alone would star among the other tested rows, and the FDR view beside it
    tested = frame[(frame["kind"] != "aa_change") & frame["verdict"].isin(["faster", "slower", "no change",
                                                                           "undecided"])]
    assert re.search(rf"\d+ of {len(tested)} tested comparisons (is|are) starred; if nothing had changed, chance alone "
                     rf"would star about {0.05 * len(tested):.1f} of them", markdown)
    assert "false-discovery rate (Benjamini-Hochberg" in markdown


def test_aa_twins_stay_out_of_the_image_chain_and_get_their_own_tables(built):
    frame, markdown, _ = built
    changes = frame.query("kind == 'image_change'")
    assert set(zip(changes["against"], changes["image"])) == {("base", "new")}
    assert "### A/A, one image under two names: base (torch 2.0.1) → base-aa (torch 2.0.1)" in markdown
    assert "### base (torch 2.0.1) → new (torch 2.1.0) · CPU (hand-made) · batch size 1" in markdown
    assert "base-aa (torch 2.0.1) → new" not in markdown


def test_without_aa_twins_in_run_json_the_twin_is_an_ordinary_image(tmp_path):
    frame, markdown, _ = _build(tmp_path, twins=False)
    assert frame.query("kind == 'aa_change'").empty and "A/A" not in markdown.split("## Charts")[0]
    changes = frame.query("kind == 'image_change'")
    assert set(zip(changes["against"], changes["image"])) == {("base", "base-aa"), ("base-aa", "new")}


@pytest.mark.parametrize(("image", "model"), [("base", "vit"), ("new", "vit"), ("new", "resnet")])
def test_speedup_rows_carry_the_inverted_interval_of_compiled_against_eager(built, image, model):
    row = built[0].query(f"kind == 'speedup' and image == '{image}' and model == '{model}'").iloc[0]
    eager, compiled = MEANS[(image, model, "eager")], MEANS[(image, model, "default")]
    low, high = _welch_ratio_interval(eager, compiled)          # compiled / eager
    assert row["estimate_ratio"] == pytest.approx(scipy_stats.gmean(eager) / scipy_stats.gmean(compiled))
    assert (row["ratio_low"], row["ratio_high"]) == pytest.approx((1 / high, 1 / low))
    assert (row["low_pct"], row["high_pct"]) == pytest.approx(((1 / high - 1) * 100, (1 / low - 1) * 100))
    assert row["percent"] == pytest.approx((row["estimate_ratio"] - 1) * 100)
    assert row["verdict"] == ("faster" if high < 1 else "undecided")
    assert row["baseline_processes"] == row["candidate_processes"] == 3 and row["margin_pct"] == 3.0


def test_an_undecided_speedup_is_marked_in_the_table(built):
    frame, markdown, _ = built
    row = frame.query("kind == 'speedup' and image == 'new' and model == 'vit'").iloc[0]
    assert row["verdict"] == "undecided"          # new vit default: 7, 9, 8 ms
    assert f"({row['percent']:+.1f}%?)" in markdown


def test_every_comparison_of_two_cells_has_a_verdict_and_its_columns(built):
    frame = built[0]
    judged = frame[frame["kind"].isin(["speedup", "image_change", "aa_change", "mode_change"])]
    assert len(judged) == 3 * 2 + 4 + 4         # speed-ups: 3 images x 2 models; base -> new; A/A
    assert set(judged["verdict"]) <= {"faster", "slower", "no change", "undecided", "not tested"}
    assert judged[["estimate_ratio", "ratio_low", "ratio_high", "detectable_pct"]].notna().all().all()
    assert (judged["ratio_low"] <= judged["estimate_ratio"]).all()
    assert (judged["estimate_ratio"] <= judged["ratio_high"]).all()


def test_image_change_interval_is_paired_by_round_on_the_log_process_means(built):
    """Both images ran in rounds 0-2 of one run: each round's log ratio is one draw (Student's t); a speed-up
    (two cells of one image) stays Welch's on the two sides' log process means."""
    row = built[0].query("kind == 'image_change' and model == 'resnet' and mode == 'eager'").iloc[0]
    base, new = MEANS[("base", "resnet", "eager")], MEANS[("new", "resnet", "eager")]
    assert (row["ratio_low"], row["ratio_high"]) == pytest.approx(_paired_ratio_interval(base, new))
    assert row["verdict"] == "no change" and row["pairing"] == "paired by round"   # 5.0 against 5.0: inside ±3%
    speedup = built[0].query("kind == 'speedup' and image == 'new' and model == 'vit'").iloc[0]
    low, high = _welch_ratio_interval(MEANS[("new", "vit", "eager")], MEANS[("new", "vit", "default")])
    assert speedup["pairing"] == "unpaired"
    assert (speedup["ratio_low"], speedup["ratio_high"]) == pytest.approx((1 / high, 1 / low))


def test_the_speedup_chart_draws_each_interval_and_marks_the_undecided_bar(built):
    """Ratios on a log axis (×): each bar's 95% interval (comparisons.csv's ratio_low..ratio_high) is a
    horizontal line at its bar, clipped at the frame, an arrow where it reaches past it."""
    frame, _, figures = built
    axes = figures["cpu-hand-made_bs1_speedup.png"].axes[0]
    assert axes.get_xscale() == "log"
    low, high = axes.get_xlim()
    spans = sorted((min(line.get_xdata()), max(line.get_xdata())) for line in axes.lines
                   if len(line.get_xdata()) == 2 and line.get_ydata()[0] == line.get_ydata()[1])
    speedups = frame.query("kind == 'speedup'")
    expected = sorted((max(a, low), min(b, high)) for a, b in zip(speedups["ratio_low"], speedups["ratio_high"]))
    assert np.asarray(spans) == pytest.approx(np.asarray(expected))
    names = axes.get_legend_handles_labels()[1]
    assert sum(name.startswith("undecided") for name in names) == 1


def test_a_latency_that_is_not_positive_is_a_note_naming_its_record_and_never_judged(tmp_path,
                                                                                     charts_drawn_not_rendered):
    # issue 33: the one reader refuses a record it cannot vouch for (a mean of 0 ms); the report says so,
    # naming the file, and judges the cell on its other processes only
    _write_run(tmp_path / "run", twins=False)
    path = tmp_path / "run" / "new" / "vit_bs1_default_float32.r1.json"
    record = json.loads(path.read_text())
    record["timing"]["mean_ms"] = 0.0
    path.write_text(json.dumps(record))
    build_report([tmp_path / "run"], tmp_path / "out", ["md", "csv"])
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "vit_bs1_default_float32.r1.json" in markdown and "mean_ms" in markdown
    derived = pd.read_csv(tmp_path / "out" / "comparisons.csv")
    cell = derived.query("kind == 'cell' and model == 'vit' and mode == 'default' and image == 'new'").iloc[0]
    assert 0.0 not in [float(mean) for mean in str(cell["process_means"]).split(";")]


def test_verdicts_use_the_margin_the_run_recorded(built, tmp_path):
    # base resnet eager against new: [5.0, 5.01, 4.99] vs [5.0, 5.005, 4.995] -> inside ±3%, not ±0.1%
    wide, tight = built[0], _build(tmp_path, twins=True, margin_pct=0.1)
    query = "kind == 'image_change' and model == 'resnet' and mode == 'eager'"
    assert wide.query(query).iloc[0]["verdict"] == "no change" and wide.query(query).iloc[0]["margin_pct"] == 3.0
    row = tight[0].query(query).iloc[0]
    assert row["verdict"] == "undecided" and row["margin_pct"] == 0.1
    assert "| no change (±0.1%) |" in tight[1]
    assert "no change within ±0.1%" in tight[1] and "±3%" not in tight[1]


def _verdicts_at(root, recorded, given):
    """comparisons.csv and report.md of the planted run with ``recorded`` in run.json, built at ``given``."""
    if not (root / "run").exists():
        _write_run(root / "run", twins=True, margin_pct=recorded)
    out = root / f"out-{given}"
    build_report([root / "run"], out, ["md", "csv"], margin_pct=given)
    return pd.read_csv(out / "comparisons.csv"), (out / "report.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("recorded", [None, 0.1])
def test_report_margin_pct_rejudges_a_comparison_of_known_interval_and_says_which_margin(tmp_path, recorded,
                                                                                        charts_drawn_not_rendered):
    # base resnet eager against new, paired by round: the interval from scipy, not from the report's code
    low, high = _paired_ratio_interval(MEANS[("base", "resnet", "eager")], MEANS[("new", "resnet", "eager")])
    threshold = max(high - 1, 1 / low - 1) * 100   # the smallest margin whose band holds the interval
    assert low < 1 < high and 0.05 < threshold < 3
    query = "kind == 'image_change' and model == 'resnet' and mode == 'eager'"
    faster = "kind == 'speedup' and image == 'base' and model == 'vit'"   # 10 ms eager -> 8 ms: faster at any margin
    for margin, verdict in [(threshold * 1.05, "no change"), (threshold * 0.95, "undecided")]:
        frame, markdown = _verdicts_at(tmp_path, recorded, margin)
        row = frame.query(query).iloc[0]
        assert row["verdict"] == verdict and row["margin_pct"] == pytest.approx(margin)
        assert frame.query(faster).iloc[0]["verdict"] == "faster"
        was = "the default ±3%" if recorded is None else "±0.1% recorded by the runs"
        assert f"equivalence margin ±{margin:g}% given to \"matrixbench report --margin-pct\", in place of {was}" \
            in markdown and f"no change within ±{margin:g}%" in markdown


def test_without_margin_pct_the_report_names_no_override(built):
    assert "--margin-pct" not in built[1]


def test_the_margin_note_in_html_has_no_markdown_backticks(tmp_path, charts_drawn_not_rendered):
    _write_run(tmp_path / "run", twins=False)
    build_report([tmp_path / "run"], tmp_path / "out", ["html"], margin_pct=10)
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    note = next(line for line in html.splitlines() if "equivalence margin ±10%" in line)
    assert "`" not in note and "given to &#34;matrixbench report --margin-pct&#34;" in note


def test_html_legends_show_code_spans_as_code_never_as_backticks_and_stay_escaped():
    from matrixbench.report.render import code_spans

    assert str(code_spans("matrix.yaml `prices:` or `report --price` <b>")) == (
        "matrix.yaml <code>prices:</code> or <code>report --price</code> &lt;b&gt;")
    assert str(code_spans("`<script>`")) == "<code>&lt;script&gt;</code>"


def test_no_legend_of_a_gpu_report_in_html_shows_a_backtick(tmp_path, charts_drawn_not_rendered):
    build_report([FIXTURES / "gpu-run"], tmp_path / "out", ["html"])
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    legends = [line for line in html.splitlines() if line.startswith('<p class="legend">')]
    assert len(legends) >= 5 and not any("`" in line for line in legends)
    assert any("<code>" in line for line in legends)
