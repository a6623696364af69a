"""Issue 32's costs in the bill (matrixbench.executors.scheduler.settings_delta_s) and energy per image over the
extended loop (matrixbench.report.cells), on the H100 records."""
import pytest

from matrixbench.executors.scheduler import MODEL_S, TINY_MODEL_S, Estimates, settings_delta_s
from runner.energy import ENERGY_MIN_S
from runner.schema import read_record
from tests.hostsim import RECORDS


def _record(name):
    return read_record(RECORDS / name)


def test_paired_blocks_and_the_energy_minimum_are_in_the_bill():
    record = _record("resnet_bs1_reduce-overhead_float32.json")    # 300 calls in 0.18 s, NVML energy
    loop_s = record["timing"]["loop_wall_ms"] / 1000.0
    paired = 2 * loop_s + record["timing"]["warmup_s"]
    minimum = ENERGY_MIN_S - loop_s
    assert settings_delta_s(record, {"paired": True, "min_time_s": "auto"}) == pytest.approx(paired + minimum)
    assert settings_delta_s(record, {"paired": False, "min_time_s": "auto"}) == pytest.approx(minimum)
    assert settings_delta_s(record, {"paired": False, "min_time_s": 0}) == 0.0


def test_eager_cells_pay_no_paired_blocks():
    record = _record("detr-resnet-101_bs1_eager_float32.json")      # 12.3 s loop: past the energy minimum
    assert settings_delta_s(record, {"paired": True, "min_time_s": "auto"}) == 0.0


def test_a_record_with_paired_blocks_costs_less_under_no_paired():
    record = _record("resnet_bs1_default_float32.json")
    record["timing"]["paired"] = {"duration_s": 3.0}
    assert settings_delta_s(record, {"paired": False, "min_time_s": 0}) == -3.0


def test_the_model_estimate_adds_an_eager_loop_for_paired_compiled_cells(tmp_path):
    from runner.core import Cell, Repeat

    class Work:
        out_dir = tmp_path / "run" / "image"
        image_name = "image"

    for size, table in (("full", MODEL_S), ("tiny", TINY_MODEL_S)):
        cell = Cell(model="resnet", task="image-classification", weights="random", size=size, batch_size=1,
                    mode="default", fullgraph=False, dtype="float32")
        assert Estimates(settings={"paired": True})(Work(), Repeat(cell)) == table["default"] + table["eager"]
        assert Estimates(settings={"paired": False})(Work(), Repeat(cell)) == table["default"]
    assert TINY_MODEL_S["default"] < MODEL_S["default"] / 2    # the CPU smoke matrix's tiny models compile in seconds


def test_energy_per_image_counts_the_calls_the_counter_covered():
    from matrixbench.report.cells import _counted_calls

    assert _counted_calls({"timing.energy.calls": 4200, "timing.n": 300}) == 4200
    assert _counted_calls({"timing.energy.calls": None, "timing.n": 300}) == 300
    assert _counted_calls({"timing.energy.calls": float("nan"), "timing.n": 300}) == 300


def _flat(record):
    from matrixbench.report.records import flatten

    return flatten(record)


def test_report_notes_mark_launch_bound_cells_stall_laden_processes_and_a_moved_host():
    from matrixbench.report import host_notes

    # the H100's two ResNet eager processes (v3: launch unknown, stalls from samples_ms) ...
    old = [host_notes.process_host(_flat(_record(name))) for name in
           ("resnet_bs1_eager_float32.json", "resnet_bs1_eager_float32.r1.json")]
    assert [p["stall_laden"] for p in old] == [False, True] and old[0]["launch_bound"] is None
    # ... and v4 processes: launch-bound, on a host whose speed reference moved 30% between them
    new = [{"launch_bound_share": 1.0, "launch_bound": True, "stall_laden": False, "stall_share": 0.0,
            "speed_before": before, "speed_after": before, "speed_moved": False, "steal_share": 0.0}
           for before in (10.0, 13.0)]
    graphs = [dict(new[0], launch_bound_share=0.1, launch_bound=False, speed_before=10.0)] * 2
    rows = [{"image": "h100", "cell.model": "resnet", "cell.batch_size": 1, "cell.mode": "eager", "process_host": new},
            {"image": "h100", "cell.model": "resnet", "cell.batch_size": 1, "cell.mode": "reduce-overhead",
             "process_host": graphs},
            {"image": "old", "cell.model": "resnet", "cell.batch_size": 1, "cell.mode": "eager", "process_host": old}]
    text = "\n".join(host_notes.lines(rows))
    assert "Launch-bound" in text and "h100: resnet bs1 eager (100%)" in text and "reduce-overhead (" not in text
    assert "Stall-laden processes" in text and "old: resnet bs1 eager (1 of 2)" in text
    assert "The host moved" in text and host_notes.host_moved(new) is True and host_notes.host_moved(graphs) is False
    assert host_notes.host_moved(old) is None


def test_cpu_cells_are_not_called_launch_bound_the_host_is_their_device():
    """On the CPU the launch-bound share is 1 by construction (docs/method.md): the GPU-waited-for-the-host note
    would list every CPU cell and say nothing; a GPU cell beside them is still marked."""
    from matrixbench.report import host_notes

    bound = [{"launch_bound_share": 1.0, "launch_bound": True, "stall_laden": False, "stall_share": 0.0,
              "speed_before": 10.0, "speed_after": 10.0, "speed_moved": False, "steal_share": 0.0}] * 2
    cpu = {"image": "latest", "cell.model": "resnet", "cell.batch_size": 1, "cell.mode": "eager", "device": "cpu",
           "process_host": bound}
    assert not any("aunch-bound" in line for line in host_notes.lines([cpu]))
    text = "\n".join(host_notes.lines([cpu, dict(cpu, image="h100", device="cuda")]))
    assert "Launch-bound" in text and "h100: resnet bs1 eager (100%)" in text and "latest:" not in text


def test_no_paired_and_the_loop_settings_flow_from_the_host_to_the_runner(tmp_path):
    """run --no-paired --min-time 3 --target-stdrel 0.01: the matrix, the cells file the host writes (v3), the
    settings the runner reads from it."""
    from pathlib import Path

    from matrixbench.matrix import Overrides, load_matrix, runner_settings
    from runner.cells_file import validate_settings
    from runner.schema import CELLS_SCHEMA_VERSION

    root = Path(__file__).resolve().parents[1]
    matrix = load_matrix(root / "matrix-cpu-smoke.yaml",
                         Overrides(paired=False, min_time_s=3.0, target_stdrel=0.01))
    settings = runner_settings(matrix, "cpu")
    assert settings["paired"] is False and settings["min_time_s"] == 3.0 and settings["target_stdrel"] == 0.01
    assert validate_settings(settings)["paired"] is False
    assert CELLS_SCHEMA_VERSION == 5
    default = runner_settings(load_matrix(root / "matrix-cpu-smoke.yaml"), "cpu")
    assert default["paired"] is True and default["min_time_s"] == "auto" and default["target_stdrel"] is None


def test_the_runner_cli_takes_no_paired_and_auto():
    from runner.cli import build_parser, cells_file_from_args

    args = build_parser().parse_args(["--out", "x", "--models", "resnet", "--size", "tiny", "--no-paired",
                                      "--min-time-s", "auto", "--target-stdrel", "0.02"])
    settings = cells_file_from_args(args).settings
    assert settings["paired"] is False and settings["min_time_s"] == "auto" and settings["target_stdrel"] == 0.02
    assert cells_file_from_args(build_parser().parse_args(["--out", "x", "--models", "resnet"])).settings["paired"]


def test_host_noise_says_what_a_comparison_resolves_and_warns_on_a_noisy_host():
    from matrixbench import host_noise
    from runner.host import Snapshot

    def run(block_levels):
        now = [0.0]
        levels = iter(block_levels)
        state = {"level": next(levels), "left": 0}

        def clock():
            return now[0]

        def work():
            now[0] += state["level"] / 1000.0
            if now[0] >= state.get("until", 0.0):
                state["until"] = now[0] + 1.0
                state["level"] = next(levels, state["level"])
        snaps = iter([Snapshot(0.0, [0, 1000], [0, 0, 0.0]), Snapshot(20.0, [50, 2000], [40, 0, 20.0])])
        return host_noise.measure(seconds=10.0, blocks=10, work=work, clock=clock, snap=lambda: next(snaps))

    quiet = run([5.0] * 12)
    noisy = run([5.0, 7.0, 4.0, 6.5, 5.0, 8.0, 4.5, 6.0, 5.5, 7.5, 5.0, 5.0])
    assert quiet.block_cv < 1e-9 and quiet.resolvable_pct < 1e-6 and quiet.steal_share == 0.05
    assert noisy.resolvable_pct > host_noise.UNDECIDED_PCT
    assert any("undecided" in line for line in noisy.lines()) and not any("undecided" in line for line in quiet.lines())


def test_turns_add_one_more_loop_and_a_record_in_turns_costs_its_blocks_less_without():
    """Issue 34's turns: as many calls again as the timed loop (10 blocks of iterations / 10)."""
    record = _record("resnet_bs1_eager_float32.json")               # 300 calls: past no minimum (min_time_s 0)
    loop_s = record["timing"]["loop_wall_ms"] / 1000.0
    plain = {"paired": True, "min_time_s": 0}
    assert settings_delta_s(record, {**plain, "turns": True}) == pytest.approx(loop_s)
    assert settings_delta_s(record, {**plain, "turns": False}) == 0.0
    samples = record["timing"]["samples_ms"]
    calls = len(samples) // 10
    blocks = [sum(samples[i * calls:(i + 1) * calls]) / calls for i in range(10)]
    record["timing"]["turns"] = {"block_ms": blocks, "block_calls": calls}
    assert settings_delta_s(record, {**plain, "turns": True}) == 0.0
    assert settings_delta_s(record, {**plain, "turns": False}) == pytest.approx(-sum(samples[:10 * calls]) / 1000.0)



def test_a_process_in_turns_is_billed_without_its_waits_for_the_partner(tmp_path):
    """The second side of a pair waits for the first's whole own part: its duration_s holds that wait, which is
    the partner's time (timing.turns.waited_s), not its own."""
    import json

    from matrixbench.executors.scheduler import record_duration

    record = _record("resnet_bs1_eager_float32.json")
    path = tmp_path / "alone.json"
    path.write_text(json.dumps(record))
    alone = record_duration(path)
    record["timing"]["turns"] = {"role": "second", "partner": "stable", "pair_id": "p", "blocks": 10,
                                 "block_calls": 30, "block_ms": [], "block_median_ms": [], "lost": None,
                                 "omp_wait_policy": None, "waited_s": 4.0}
    record["duration_s"] += 4.0
    path = tmp_path / "in_turns.json"
    path.write_text(json.dumps(record))
    assert alone and record_duration(path) == pytest.approx(alone)
