"""What it costs (report.cost, report.cost_tables, matrixbench.matrix.prices), on hand-made records.

Every expected number is worked out by hand in the test, from the SYNTHETIC latencies, energies
and prices the records and options are given; none is a GPU's measurement.
"""
import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from host_helpers import synthetic_record
from matrixbench.cli import main
from matrixbench.errors import MatrixError, PriceError
from matrixbench.matrix import load_matrix
from matrixbench.matrix.prices import FROM_COMMAND_LINE, Price, parse_price_option, price_for
from matrixbench.report import build_report, cost, records, tables
from matrixbench.report.cells import CellIndex
from runner.cells_file import cells_file_from_dict
from runner.core import Status
from runner.timing import summarize

FIXTURES = Path(__file__).parent / "fixtures"
GPU = "NVIDIA SYNTHETIC-A100 GPU"     # matched by the price type "SYNTHETIC-A100"
PRICE = Price("SYNTHETIC-A100", 2.0, "2026-11-24")


# ---- the arithmetic, by hand ---------------------------------------------------------------

def test_images_per_second_and_dollars_per_million():
    # batch 4 every 20 ms: 4 / 0.020 s = 200 images/s
    assert cost.images_per_second(4, 20.0) == pytest.approx(200.0)
    # 1 image per 10 ms = 360,000 images/h; 1e6 images take 2.7778 h; at $1.29/h: $3.5833
    assert cost.usd_per_million_images(1.29, 10.0, 1) == pytest.approx(1.29 * 1e6 / 360_000)
    assert cost.usd_per_million_images(1.29, 10.0, 1) == pytest.approx(3.58333, rel=1e-5)


def row(mode="eager", mean_ms=10.0, batch=4, device=GPU, image="new", model="vit", processes=None, first_calls=(1.0,),
        energy=(), durations=(60.0,), accuracy="pass", flags=()):
    samples = processes or [[mean_ms] * 4]
    means = [sum(values) / len(values) for values in samples]
    return {"device_name": device, "image": image, "row_key": model, "cell.model": model,
            "cell.task": "image-classification", "cell.size": "full", "cell.dtype": "float32",
            "cell.batch_size": batch, "cell.mode": mode,
            "mode_label": mode, "status": "ok", "timing.mean_ms": mean_ms, "process_samples": samples,
            "process_means": means,
            "process_first_call_s": list(first_calls), "process_energy": list(energy),
            "process_duration_s": list(durations), "accuracy.status": "skipped" if mode == "eager" else accuracy,
            "timing.flags": list(flags)}


def test_energy_per_image_over_every_process():
    # 300 J over 100 calls of batch 4, and 330 J over another 100: 630 J / 800 images = 0.7875 J;
    # 630 J over 1.0 s + 1.1 s = 300 W
    energy = cost.cell_energy(row(energy=[
        {"energy_j": 300.0, "n": 100, "loop_s": 1.0, "uncertain": False, "source": "nvml_total_energy"},
        {"energy_j": 330.0, "n": 100, "loop_s": 1.1, "uncertain": True, "source": "nvml_total_energy"}]))
    assert energy.joules_per_image == pytest.approx(0.7875)
    assert energy.average_power_w == pytest.approx(300.0)
    assert energy.uncertain is True and energy.reason is None
    missing = cost.cell_energy(row(energy=[{"energy_j": None, "n": 100, "loop_s": 1.0, "reason": "no counter"}]))
    assert missing.joules_per_image is None and missing.reason == "no counter"
    assert cost.cell_energy(row()).reason == cost.NOT_RECORDED


def test_break_even_calls_by_hand():
    # compile + first call 20.5 s; eager 10 ms, compiled 6 ms: (20.5 - 0.010) / 0.004 = 5122.5 calls
    assert cost.break_even_calls(20.5, 10.0, 6.0) == pytest.approx(5122.5)
    assert cost.break_even_calls(20.5, 10.0, 12.0) == cost.NEVER      # slower: never pays
    assert cost.break_even_calls(20.5, 10.0, 10.0) == cost.NEVER
    assert cost.break_even_calls(0.005, 10.0, 6.0) == 0.0             # cheaper than one eager call


def test_payback_cold_and_warm_with_an_interval():
    eager = row(processes=[[10.0] * 4, [10.0] * 4])
    # identical processes: every bootstrap ratio is exactly 6/10, so the interval is the point
    compiled = row("default", 6.0, processes=[[6.0] * 4, [6.0] * 4], first_calls=(20.5, 4.5))
    result = cost.payback(eager, compiled)
    assert result.cold.calls == pytest.approx(5122.5)
    assert (result.cold.low, result.cold.high) == pytest.approx((5122.5, 5122.5))
    # warm: (4.5 - 0.010) / 0.004 = 1122.5 calls
    assert result.warm.compile_s == 4.5 and result.warm.calls == pytest.approx(1122.5)
    one = cost.payback(row(), row("default", 6.0, first_calls=(20.5,)))
    assert one.cold.low is None and one.warm is None


def test_payback_interval_from_process_means_by_hand():
    """Welch's t on the log process means, worked out here with scipy's t quantile only; 3 against 2
    processes are unequal sides with the smaller under 5, so the degrees of freedom are Hsu's n_small - 1
    (issue 34: Welch-Satterthwaite's are anti-conservative there)."""
    import math

    from scipy.stats import t

    eager_means, compiled_means = [10.0, 10.4, 9.6], [6.0, 6.3]
    eager = row(mean_ms=10.0, processes=[[m] * 4 for m in eager_means])
    compiled = row("default", 6.15, processes=[[m] * 4 for m in compiled_means], first_calls=(20.5, 5.0))
    logs_e, logs_c = [math.log(m) for m in eager_means], [math.log(m) for m in compiled_means]

    def var(xs):
        mean = sum(xs) / len(xs)
        return sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)

    se2_e, se2_c = var(logs_e) / 3, var(logs_c) / 2
    df = min(len(eager_means), len(compiled_means)) - 1
    centre = sum(logs_c) / 2 - sum(logs_e) / 3
    half = t.ppf(0.975, df) * math.sqrt(se2_e + se2_c)
    low_ratio, high_ratio = math.exp(centre - half), math.exp(centre + half)
    result = cost.payback(eager, compiled)
    # the point: (20.5 - 0.010) / (0.010 - 0.00615) calls
    assert result.cold.calls == pytest.approx((20.5 - 0.010) / (0.010 - 0.00615))
    assert result.cold.low == pytest.approx((20.5 - 0.010) / (0.010 - 0.010 * low_ratio))
    expected_high = (cost.NEVER if high_ratio >= 1 else (20.5 - 0.010) / (0.010 - 0.010 * high_ratio))
    assert result.cold.high == pytest.approx(expected_high)


def test_payback_interval_reaches_never_when_compiled_may_be_slower():
    eager = row(processes=[[10.0] * 4, [10.0] * 4])
    compiled = row("default", 10.0, processes=[[9.0] * 4, [11.0] * 4], first_calls=(20.5,))
    result = cost.payback(eager, compiled)
    assert result.cold.never and result.cold.high == cost.NEVER


def test_cheapest_per_model_and_batch_skips_accuracy_failures_and_unpriced():
    prices = {"SYNTHETIC-A100": PRICE}
    cells = [cost.cell_cost(r, prices) for r in (
        row("eager", 10.0, image="old"), row("default", 8.0, image="old"),
        row("default", 5.0, image="new", accuracy="fail"), row("reduce-overhead", 7.0, image="new"),
        row("eager", 1.0, device="CPU (SYNTHETIC)"))]
    best = cost.cheapest(cells)
    assert [(c.row["image"], c.row["cell.mode"]) for c in best] == [("new", "reduce-overhead")]
    # $2/h x 7 ms / 4 images per call: 2 / 3600 x 0.00175 s x 1e6 = 0.97222
    assert best[0].usd_per_million == pytest.approx(0.972222, rel=1e-5)


def test_prices_match_the_gpu_name_as_a_word_and_the_longest_wins():
    prices = {"A100": Price("A100", 1.0, "2026-11-24"), "A100-SXM4-80GB": Price("A100-SXM4-80GB", 2.0, "2026-11-24"),
              "A10": Price("A10", 0.5, "2026-11-24")}
    assert price_for("NVIDIA A100-SXM4-40GB", prices).usd_per_hour == 1.0
    assert price_for("NVIDIA A100-SXM4-80GB", prices).usd_per_hour == 2.0
    assert price_for("NVIDIA A10", prices).usd_per_hour == 0.5
    assert price_for("NVIDIA A1000", prices) is None and price_for("CPU (x)", prices) is None


@pytest.mark.parametrize("text, fragment", [("A100", "no GPU type"), ("=1.2", "no GPU type"),
                                            ("A100=cheap", "'cheap' is not a number"),
                                            ("A100=0", "above 0"), ("A100=-1", "above 0"), ("A100=nan", "above 0")])
def test_bad_price_options_name_the_option_and_the_fix(text, fragment):
    with pytest.raises(PriceError, match="--price") as caught:
        parse_price_option(text)
    assert fragment in str(caught.value) and "--price A100=1.29" in str(caught.value)
    assert parse_price_option("A100=1.29") == Price("A100", 1.29, FROM_COMMAND_LINE)


def test_cli_refuses_a_bad_price_with_exit_code_2(tmp_path):
    result = CliRunner().invoke(main, ["report", str(FIXTURES / "cpu-run"), "--out", str(tmp_path), "--price", "A100"])
    assert result.exit_code == 2 and "--price 'A100'" in result.output


@pytest.mark.parametrize("entry, message", [
    ('{usd_per_hour: 0, looked_up: "2026-11-24"}', "prices.A100.usd_per_hour must be > 0"),
    ('{usd_per_hour: "x", looked_up: "2026-11-24"}', "prices.A100.usd_per_hour must be the dollars"),
    ("{usd_per_hour: 1.29, looked_up: 2026-11-24}", 'prices.A100.looked_up must be the date you looked the price up'),
    ("{usd_per_hour: 1.29}", "prices.A100"),
    ("1.29", "prices.A100 must be a mapping such as"),
])
def test_matrix_prices_errors_name_the_field(tmp_path, entry, message):
    text = (Path(__file__).parent.parent / "matrix.yaml").read_text() + f"prices:\n  A100: {entry}\n"
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    with pytest.raises(MatrixError, match=message.replace(".", r"\.")):
        load_matrix(path)


def test_matrix_prices_load_and_leave_the_run_alone(tmp_path):
    base = (Path(__file__).parent.parent / "matrix.yaml").read_text()
    path = tmp_path / "matrix.yaml"
    path.write_text(base + 'prices:\n  A100: {usd_per_hour: 1.29, looked_up: "2026-11-24"}\n')
    priced = load_matrix(path)
    path.write_text(base)
    plain = load_matrix(path)
    assert priced.prices == {"A100": {"usd_per_hour": 1.29, "looked_up": "2026-11-24"}}
    assert "prices" not in plain.to_dict() and priced.content_hash() == plain.content_hash()


def test_the_shipped_matrix_ships_no_price():
    assert load_matrix(Path(__file__).parent.parent / "matrix.yaml").prices == {}


def test_a_throttled_side_is_never_starred():
    from matrixbench.report import stats, verdicts

    fast = [[6.0, 6.1, 5.9, 6.0], [6.0, 6.05, 5.95, 6.0], [6.1] * 4]
    slow = [[10.0, 10.1, 9.9, 10.0], [10.0, 10.05, 9.95, 10.0], [10.1] * 4]
    clean = verdicts.judge_cells(row(processes=slow), row(processes=fast))
    assert clean.verdict == stats.FASTER and tables.change_text(clean).endswith(verdicts.STAR)
    throttled = verdicts.judge_cells(row(processes=slow), row(processes=fast, flags=["throttled"]))
    assert throttled.verdict == stats.UNDECIDED and not throttled.starred
    assert not tables.change_text(throttled).endswith(verdicts.STAR)
    assert (throttled.low, throttled.high) == (clean.low, clean.high)   # the interval is still shown


# ---- the whole report, from records on disk -------------------------------------------------

def _record(mode, mean_ms, first_call_s, energy_j, repeat=0, duration_s=90.0, image="new"):
    cell = {"model": "vit", "task": "image-classification", "weights": "random", "size": "full", "batch_size": 2,
            "mode": mode, "fullgraph": False, "dtype": "float32", "attention": "eager"}
    plan = cells_file_from_dict({"settings": {"iterations": 10}, "image_name": image, "cells": [cell]})
    environment = {"python": "3.10", "torch": "2.1.0", "torch_git": None, "transformers": "4.43.4", "cuda": "11.8",
                   "cudnn": 8700, "gpu_name": GPU, "gpu_uuid": None, "gpu_count": 1, "driver": "SYNTHETIC",
                   "cpu_model": "SYNTHETIC CPU", "threads": 1, "platform": "SYNTHETIC", "hostname": "synthetic",
                   "image_name": image, "image_id": None}
    record = synthetic_record(plan, "cuda", environment)
    record.status, record.duration_s, record.repeat = Status.OK, duration_s, repeat
    record.memory = {"peak_bytes": 1, "kind": "cuda_max_allocated"}
    record.accuracy = {"max_abs_diff": None, "tolerance": None, "status": "skipped" if mode == "eager" else "pass"}
    loop_s = mean_ms * 10 / 1000
    record.timing = {"load_s": 1.0, "first_call_s": first_call_s, "warmup_s": 1.0, "timer": "cuda_event",
                     **summarize([mean_ms] * 10, 0.1), "loop_wall_ms": mean_ms * 10, "wall_mean_ms": mean_ms,
                     "timer_mismatch": False, "warmup_calls": 10, "host_syncs_per_call": 0, "cudagraphs": None,
                     "gpu_state": None, "flags": [],
                     "energy": {"source": "nvml_total_energy", "energy_j": energy_j, "loop_s": loop_s,
                                "average_power_w": energy_j / loop_s, "max_error_j": 0.001, "uncertain": False,
                                "wrapped": False, "reason": None},
                     "violations": {"power_ms": 0.0, "thermal_ms": 0.0, "counted_ms": loop_s * 1000, "reason": None}}
    return record.to_dict()


def _write_run(root, prices=None):
    run = root / "run"
    (run / "new").mkdir(parents=True)
    for data in (_record("eager", 50.0, 0.5, 100.0), _record("default", 40.0, 30.05, 60.0)):
        (run / "new" / f"{data['cell_id']}.json").write_text(json.dumps(data))
    manifest = {"schema_version": 1, "images": ["new"], "matrix": {"prices": prices} if prices else {}}
    (run / "run.json").write_text(json.dumps(manifest))
    return run


def _csv(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_report_costs_from_records_with_a_matrix_price(tmp_path):
    run = _write_run(tmp_path, {"SYNTHETIC-A100": {"usd_per_hour": 3.6, "looked_up": "2026-11-24"}})
    build_report([run], tmp_path / "out", ["md", "csv"])
    lines = {line["mode"]: line for line in _csv(tmp_path / "out" / "costs.csv")}
    eager, compiled = lines["eager"], lines["default"]
    # eager: batch 2 per 50 ms = 40 images/s; 100 J over 10 calls x 2 = 5 J/image; 100 J / 0.5 s = 200 W
    assert float(eager["throughput_images_per_s"]) == pytest.approx(40.0)
    assert float(eager["energy_per_image_j"]) == pytest.approx(5.0)
    assert float(eager["average_power_w"]) == pytest.approx(200.0)
    # $3.6/h = $0.001/s; 0.025 s per image: $25 per million
    assert float(eager["cost_usd_per_million_images"]) == pytest.approx(25.0)
    # default: 60 J / 20 images = 3 J/image; 0.020 s per image: $20 per million
    assert float(compiled["energy_per_image_j"]) == pytest.approx(3.0)
    assert float(compiled["cost_usd_per_million_images"]) == pytest.approx(20.0)
    # (30.05 - 0.050) / (0.050 - 0.040) = 3000 calls
    assert float(compiled["break_even_cold_calls"]) == pytest.approx(3000.0)
    assert compiled["break_even_warm_calls"] == "" and compiled["price_looked_up"] == "2026-11-24"
    bill = _csv(tmp_path / "out" / "bill.csv")
    # two processes of 90 s: 0.05 device-hours, x $3.6 = $0.18
    assert float(bill[0]["device_hours_h"]) == pytest.approx(0.05) and float(bill[0]["cost_usd"]) == pytest.approx(0.18)
    text = (tmp_path / "out" / "report.md").read_text()
    section = text[text.index("## What it costs"):text.index("## Environment")]
    assert "SYNTHETIC-A100: $3.6 per hour (looked up 2026-11-24)" in section
    assert ("| Image Classification/ViT | 2 | new (torch 2.1.0) | eager | 50.000 | 40.0 | 5.00 | 200.0 | 25.00 |"
            in section)
    assert "| default | 30.1 | 3,000 | not tested: one process per cell |" in section
    assert "### Cheapest image × mode" in section and "| Total | all images | 2 | 0.0500 | 0.18 |" in section
    assert "energy per image (J)" in section and "compile break-even" in section


def test_report_without_a_price_has_no_dollar_columns_and_the_option_adds_one(tmp_path):
    run = _write_run(tmp_path)
    build_report([run], tmp_path / "plain", ["md", "csv"])
    header = _csv(tmp_path / "plain" / "costs.csv")[0].keys()
    assert not any("usd" in column or "price" in column for column in header)
    assert "cost_usd" not in _csv(tmp_path / "plain" / "bill.csv")[0]
    text = (tmp_path / "plain" / "report.md").read_text()
    assert "| $/M images |" not in text and "### Cheapest image" not in text
    build_report([run], tmp_path / "priced", ["csv"], [Price("SYNTHETIC-A100", 7.2, FROM_COMMAND_LINE)])
    eager = next(line for line in _csv(tmp_path / "priced" / "costs.csv") if line["mode"] == "eager")
    # $7.2/h = $0.002/s x 0.025 s per image x 1e6 = $50
    assert float(eager["cost_usd_per_million_images"]) == pytest.approx(50.0)


def test_old_records_show_the_energy_columns_as_absent(tmp_path):
    frame = records.load_results([FIXTURES / "cpu-run"])
    assert frame["timing.energy.energy_j"].isna().all()
    build_report([FIXTURES / "cpu-run"], tmp_path, ["csv"])
    lines = _csv(tmp_path / "costs.csv")
    assert lines and all(line["energy_per_image_j"] == "" for line in lines)
    assert {line["energy_missing_reason"] for line in lines} == {cost.NOT_RECORDED}
    cells = CellIndex(frame)
    assert all(cost.cell_energy(r).joules_per_image is None for r in cells.rows)


def test_cost_charts_only_where_they_have_bars(tmp_path):
    written = build_report([FIXTURES / "cpu-run"], tmp_path / "old", ["md"])
    names = [path.name for path in written]
    assert not any(name.endswith("_energy.png") for name in names)      # v2 records: no energy to draw
    assert any(name.endswith("_break_even.png") for name in names)
    written = build_report([_write_run(tmp_path)], tmp_path / "new", ["md", "html"])
    assert {path.name for path in written} >= {"nvidia-synthetic-a100-gpu_bs2_energy.png",
                                               "nvidia-synthetic-a100-gpu_bs2_break_even.png"}
    html = (tmp_path / "new" / "report.html").read_text()
    assert "<h2>What it costs</h2>" in html and html.count("data:image/png;base64") >= 3


def test_a_throttled_flag_footnote_gives_the_violation_times():
    from matrixbench.report.tables import _throttle_evidence

    evidence = _throttle_evidence({"timing.violations.power_ms": 12.5, "timing.violations.thermal_ms": 0.0})
    assert evidence == " (clocks held down during the loop: power limit 12.5 ms)"
    assert _throttle_evidence({}) == ""


def test_a_price_that_matches_no_device_gets_a_note_naming_the_devices(tmp_path):
    prices = [Price("A100", 1.29, FROM_COMMAND_LINE), Price("CPU", 0.5, FROM_COMMAND_LINE)]
    build_report([FIXTURES / "cpu-run"], tmp_path, ["md", "html"], prices)
    markdown = (tmp_path / "report.md").read_text()
    note = ("--price A100=1.29 prices nothing: no record's device matches A100 "
            "(the devices here: CPU (SYNTHETIC CPU)).")
    assert f"> **Note:** {note}" in markdown and markdown.count("prices nothing") == 1   # CPU=0.5 matches
    assert note.replace("'", "&#39;") in (tmp_path / "report.html").read_text()
    assert "| $/M images |" in markdown      # the CPU price prices the CPU cells


def test_the_bill_lists_images_in_matrix_order_and_shows_a_small_amount_as_it_is(tmp_path):
    """run.json's order (stable, then latest), not the records' (latest/ is read first); a bill of $0.0005 is not
    shown as 0.00, and bill.csv keeps every digit."""
    run = tmp_path / "run"
    for image in ("stable", "latest"):
        (run / image).mkdir(parents=True)
        data = _record("eager", 50.0, 0.5, 100.0, image=image, duration_s=9.0)
        (run / image / f"{data['cell_id']}.json").write_text(json.dumps(data))
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "images": ["stable", "latest"]}))
    build_report([run], tmp_path / "out", ["md", "csv"], [Price("SYNTHETIC-A100", 0.2, FROM_COMMAND_LINE)])
    bill = _csv(tmp_path / "out" / "bill.csv")
    assert [line["image"] for line in bill] == ["stable", "latest"]
    # 9 s = 0.0025 device-hours x $0.2 = $0.0005 a line
    assert float(bill[0]["cost_usd"]) == pytest.approx(0.0005, rel=1e-12)
    text = (tmp_path / "out" / "report.md").read_text()
    section = text[text.index("### The run's bill"):text.index("## Models")]
    lines = [line for line in section.splitlines() if line.startswith("| ")][2:]
    assert [line.split(" | ")[1] for line in lines] == ["stable", "latest", "all images"]
    assert lines[0].endswith("| 0.0025 | 0.000500 |") and lines[2].endswith("| 0.0050 | 0.00100 |"), lines


def test_the_throughput_table_marks_the_ms_as_the_other_tables_do(tmp_path):
    """A flagged cell's marks (†, ▼, ...) follow its latency, as in every other table (tables.latency), not its
    images/s: they say how the ms were measured."""
    run = _write_run(tmp_path)
    path = next((run / "new").glob("*eager*.json"))
    data = json.loads(path.read_text())
    data["timing"]["noisy"] = True
    path.write_text(json.dumps(data))
    build_report([run], tmp_path / "out", ["md"])
    text = (tmp_path / "out" / "report.md").read_text()
    section = text[text.index("### Throughput, energy and price"):]
    row = next(line for line in section.splitlines() if "| eager |" in line)
    assert f"| 50.000{tables.NOISY_MARK}" in row and f"| 40.0{tables.NOISY_MARK}" not in row, row
