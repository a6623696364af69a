"""The benchmark scripts' own logic (benchmarks/): what they compare and when they refuse a verdict."""
import json
import sys
from pathlib import Path

import pytest

from matrixbench.matrix import load_matrix

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_harness_vs_plain as harness  # noqa: E402
import bench_repeat_stability as stability  # noqa: E402


def summary(runner_cv, plain_cv, ratio_ci95):
    return {"runner_cv": runner_cv, "plain_cv": plain_cv, "ratio_ci95": ratio_ci95, "ratio": sum(ratio_ci95) / 2}


def test_harness_refuses_a_verdict_when_the_noise_exceeds_what_it_resolves():
    assert harness.verdict(summary(0.30, 0.02, [0.98, 1.01]), 0.05).startswith("no verdict")
    assert harness.verdict(summary(0.01, 0.02, [0.80, 1.20]), 0.05).startswith("no verdict")
    assert harness.verdict(summary(0.01, 0.02, [0.98, 1.03]), 0.05).startswith("the runner agrees")
    assert harness.verdict(summary(0.01, 0.02, [1.20, 1.25]), 0.05).startswith("the runner differs")


def test_the_plain_side_compiles_as_the_seed_page_writes_it():
    calls = []

    class Torch:
        @staticmethod
        def compile(model, **kwargs):
            calls.append(kwargs)
            return "compiled"

    assert harness.seed_compile(Torch, "model", "eager") == "model"
    assert harness.seed_compile(Torch, "model", "default") == "compiled"
    assert harness.seed_compile(Torch, "model", "max-autotune") == "compiled"
    assert calls == [{}, {"mode": "max-autotune"}]


def test_the_venv_stability_matrix_keeps_the_smoke_matrix_images_and_so_their_venvs(tmp_path):
    args = stability.parse(["--backend", "venv", "--models", "vit"])
    path, images = stability.matrix_file(tmp_path, args)
    smoke = load_matrix(ROOT / "matrix-cpu-smoke.yaml").images
    ours = load_matrix(path).images
    assert images == ["stable", "latest"]
    assert {name: image.content_hash() for name, image in ours.items()} == {
        name: smoke[name].content_hash() for name in images}


def test_stability_compares_the_second_image_with_the_first_under_both_tests():
    slow = [[10.0 + 0.01 * i for i in range(20)]] * 3
    fast = [[5.0 + 0.01 * i for i in range(20)]] * 3
    records = {"stable|vit_eager": dict(enumerate(slow)), "latest|vit_eager": dict(enumerate(fast))}
    found = stability.changes(records, ["stable", "latest"])
    assert list(found) == ["vit_eager"]
    for test in ("processes", "within_process"):
        assert found["vit_eager"][test]["change_pct"] == pytest.approx(-50, abs=1)
        assert found["vit_eager"][test]["star"]
    kept = stability.survival(found, found, "processes")
    assert kept == {"changes": 1, "starred_run1": 1, "kept_run2": 1, "starred_run2": 1}


def test_contention_says_what_it_knows_and_unknown_otherwise():
    from benchmarks.machine import describe_contention

    found = {"cpu_pressure_some_pct": {"avg10": 80.0, "avg60": 83.6, "avg300": 90.0}, "sched_autogroup": True}
    assert describe_contention(found) == "CPU pressure 84% (60 s), autogroup on"
    assert describe_contention({}) == "unknown"


def test_the_slots_benchmark_compares_medians_of_interleaved_runs_and_shows_the_calibration():
    import bench_slots_cpu as slots

    def run(config, wall):   # SYNTHETIC wall times and loads
        return {"config": config, "wall_s": wall, "statuses": {"ok": 8}, "loadavg_before": (1.0, 1.0, 1.0),
                "loadavg_after": (2.0, 1.0, 1.0), "contention_before": {}, "contention_after": {}}
    result = {"cores": 2, "configs": {"A": "--slots 1", "B": "--slots 2"}, "machine": {"Model name": "SYNTHETIC"},
              "runs": [run("A", 100.0), run("B", 60.0), run("A", 120.0), run("B", 80.0)],
              "args": {"models": ["resnet"], "repeats": 1, "iterations": 20, "rounds": 2, "calibration_repeats": 2},
              "calibration_run": run("calibrate", 30.0),
              "calibration": [{"title": "CPU · latest", "rows": [{"Mode": "eager", "loaded / alone": "1.100×"}]}]}
    result["summary"] = slots.summary(result)
    assert result["summary"] == {"median_wall_s": {"A": 110.0, "B": 70.0}, "b_over_a": round(70 / 110, 3)}
    text = slots.markdown(result)
    assert "| 2 | B (--slots 2) | 80.0 | 8 ok | 1.00 -> 2.00 |" in text
    assert "| eager | 1.100× |" in text and "B / A = 0.636" in text


def test_the_adaptive_repeats_benchmark_scores_claims_against_the_planted_truth(tmp_path):
    import bench_adaptive_repeats as bench

    assert bench.correct("faster", -0.10, 3.0) and not bench.correct("faster", 0.03, 3.0)
    assert bench.correct("no change", 0.03, 3.0) and not bench.correct("no change", 0.10, 3.0)
    assert not bench.correct("undecided", 0.0, 3.0)
    bench.main(["--trials", "25", "--auto", "2-6", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "adaptive_repeats.json").read_text())
    by_name = {row["name"]: row for row in result["policies"]}
    assert [by_name[f"fixed {n}"]["processes_per_side"] for n in (3, 5, 10)] == [3, 5, 10]
    assert 2 <= by_name["auto 2-6"]["processes_per_side"] <= 6
    assert (tmp_path / "adaptive_repeats.md").read_text().startswith("# repeats auto vs fixed repeats")


def test_the_adaptive_repeats_benchmark_on_the_matrix_shape_charges_wrong_claims(tmp_path):
    """Issue 34: 3 modes x 2 images per model, every comparison a run makes (9 per model)."""
    import bench_adaptive_repeats as bench

    bench.main(["--shape", "matrix", "--trials", "6", "--batch", "2", "--auto", "3-6", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "adaptive_repeats_matrix.json").read_text())
    assert result["comparisons"] == 2 * 9
    for row in result["policies"]:
        assert row["net"] == pytest.approx(row["correct"] - row["wrong_claim"])
    assert (tmp_path / "adaptive_repeats_matrix.md").read_text().startswith("# repeats auto vs fixed repeats on the")


def test_the_host_load_benchmark_judges_speed_ups_the_right_way_round():
    """Eager twice as slow as default: both views say about 2x "faster" (a flipped ratio would say 0.5x or
    "slower"); the paired one reads each process's block pairs, the unpaired one the process means."""
    import bench_host_load as host_load

    def row(mode, mean_ms, pairs=None):
        return {"mode": mode, "mean_ms": mean_ms, "paired_pairs_ms": pairs}

    rows = [row("eager", ms) for ms in (2.0, 2.1, 1.9)]
    rows += [row("default", ms, [[2.0 * drift * ms * (1 + 0.01 * k), ms] for k in range(-2, 3)])
             for ms, drift in ((1.0, 1.0), (1.05, 1.02), (0.95, 0.98))]
    judged = host_load.judged(rows)
    for kind in ("paired", "unpaired"):
        found = judged[kind]
        assert found["verdict"] == "faster", kind
        assert found["low"] < found["speedup"] < found["high"], kind
        assert found["speedup"] == pytest.approx(2.0, rel=0.03), kind


def test_the_turns_aa_upper_bound_of_an_sd_holds_the_truth_at_its_level_and_the_goal_line_says_both():
    """bench_turns_aa decides issue 34 from a few rounds: the SD's 90% upper bound holds a known SD about 90% of
    the time at 4 and 12 rounds (simulated normal log ratios), and a design met only at the SD seen is said so."""
    import random
    import statistics

    from benchmarks.bench_turns_aa import goal_line, sd_upper
    rng = random.Random(34)
    for rounds in (4, 12):
        held = sum(sd_upper(statistics.stdev([rng.gauss(0.0, 0.05) for _ in range(rounds)]), rounds) >= 0.05
                   for _ in range(4000))
        assert 0.88 <= held / 4000 <= 0.92, (rounds, held)
    lucky = {"rounds": 4, "power_3_rounds_at_10pct": 0.6, "power_at_sd_upper": 0.1}
    sure = {"rounds": 12, "power_3_rounds_at_10pct": 0.8, "power_at_sd_upper": 0.55}
    poor = {"rounds": 4, "power_3_rounds_at_10pct": 0.2, "power_at_sd_upper": 0.05}
    line = goal_line({"resnet": {"aa-pinned": lucky, "aa-plain": poor}})
    assert "met by aa-pinned (resnet) at the SD seen; by none at its 90% upper bound" in line
    line = goal_line({"resnet": {"aa-pinned": sure}})
    assert line.endswith("at its 90% upper bound too by aa-pinned (resnet).")
    assert goal_line({"resnet": {"aa-plain": poor}}).endswith("met by no design here.")


def test_the_report_scale_benchmark_writes_the_matrix_shape_and_reports_it(tmp_path):
    """bench_report_scale at 1 model x 2 processes: every record of the shape written, the report made (exit 0)."""
    from benchmarks.bench_report_scale import main
    assert main(["--models", "1", "--repeats", "2", "--samples", "30", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "report_scale.json").read_text())
    assert result["records"] == 1 * 3 * 3 * 4 * 2 and result["report_exit"] == 0 and result["files"] > 5
    assert "SYNTHETIC records" in (tmp_path / "report_scale.md").read_text()
