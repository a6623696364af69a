"""runner.host (issue 32 item 1): the host's part of a number, on the real H100 records and on a simulation
fitted to them; the CUDA loop's launch timer against a fake GPU; old records read with unknown fields."""
import random

import pytest

from runner import host
from runner.schema import read_record
from runner.timing import time_iterations
from tests.host_sim import EVIDENCE, FakeCuda, fit, load, simulate, timelines


def _samples(name):
    return load(name)["timing"]["samples_ms"]


def test_h100_records_read_as_v4_with_unknown_host_fields():
    record = read_record(EVIDENCE / "run-acc" / "acc" / "latest" / "resnet_bs1_eager_float32.json")
    view = host.host_view(record)
    assert view["launch_bound_share"] is None and view["steal_share"] is None     # unknown, not guessed
    assert view["speed_ref_ms"] is None and view["involuntary_ctx_switches"] is None
    assert view["stalls"] == 1 and "samples_ms" in view["source"]


@pytest.mark.parametrize("name, laden", [
    ("runner_sequential_resnet_eager_2000.json", True),     # 27 calls beyond 3x: 5.8% of the loop
    ("runner_slots_resnet_eager_2000.json", True),
    ("resnet_bs1_reduce-overhead_float32.r1.json", True),   # 13 stalls among 0.6 ms graph replays
    ("resnet_bs1_reduce-overhead_float32.json", False),
    ("detr-resnet-101_bs1_reduce-overhead_float32.json", False),
    ("detr-resnet-101_bs1_eager_float32.r1.json", False),   # a level shift, not stalls
])
def test_h100_records_mark_stall_laden_processes(name, laden):
    view = host.host_view(load(name))
    assert view["stall_laden"] is laden


def test_h100_timelines_eager_resnet_is_launch_bound():
    """The independent loop's CPU-side launch timer beside its events: the host's time is the call."""
    phases = {(t["name"], t["mode"], t.get("phase")): t for t in timelines()}
    for phase in ("A", "B", "C", "D_long"):
        event = phases[("resnet", "eager", phase if phase == "D_long" else f"{phase}_after_10_warmup"
                        if phase == "A" else {"B": "B_after_3s_busy", "C": "C_gc_off"}[phase])]
        launch = phases[("resnet", "eager", f"{phase[0]}_cpu_launch")]
        share = host.launch_bound_share([event["median"]], [launch["median"]])
        assert share >= host.LAUNCH_BOUND_SHARE


def _resnet_fit():
    return fit([_samples("resnet_bs1_eager_float32.json"), _samples("resnet_bs1_eager_float32.r1.json"),
                _samples("runner_sequential_resnet_eager_2000.json")])


def test_fit_matches_the_evidence():
    fitted = _resnet_fit()
    assert 3.5 < fitted.level_ms < 6.0
    assert 0.004 < fitted.stall_rate < 0.03
    assert all(size > 3 for size in fitted.stall_size)


@pytest.mark.parametrize("seed", range(5))
def test_simulated_truth_is_what_the_fields_say(seed):
    rng = random.Random(seed)
    fitted = _resnet_fit()
    eager = simulate(fitted, 300, rng, launch_bound=True)
    graphs = simulate(fitted, 300, rng, launch_bound=False, level_ms=0.6, stall_rate=0.0)
    laden = simulate(fitted, 2000, rng, stall_rate=0.02)
    quiet = simulate(fitted, 2000, rng, stall_rate=0.0)
    assert host.launch_fields(*eager, "cuda")["launch_bound"] is True          # eager ResNet-50 at batch 1
    assert host.launch_fields(*graphs, "cuda")["launch_bound"] is False        # reduce-overhead
    assert host.stalls(laden[0])["stall_laden"] is True
    assert host.stalls(quiet[0])["stall_laden"] is False


def test_cuda_loop_times_launches_against_a_fake_gpu():
    """The GPU-only branch: events on a fake GPU clock, the host's clock around each call."""
    rng = random.Random(1)
    fitted = _resnet_fit()
    for launch_bound, expect in ((True, True), (False, False)):
        cuda = FakeCuda()
        samples, launches = simulate(fitted, 200, rng, launch_bound=launch_bound, stall_rate=0.0)
        gpu = [s * (0.5 if launch_bound else 1.0) for s in samples]   # launch-bound: the GPU's own work is less
        loop = time_iterations(cuda.step_for(launches, gpu), 200, "cuda", cuda=cuda, clock=cuda.clock)
        assert loop.launch_ms == pytest.approx(launches)
        block = host.host_block(loop.samples_ms, loop.launch_ms, "cuda", None, None, None, None)
        assert block["launch_bound"] is expect
        assert block["steal_share"] is None and block["speed_change"] is None


def test_cpu_loop_has_no_separate_launch_times_and_share_one():
    loop = time_iterations(lambda: None, 10, "cpu")
    assert loop.launch_ms is None
    assert host.launch_fields(loop.samples_ms, None, "cpu")["launch_bound_share"] == 1.0


def test_watch_reads_this_host():
    watch = host.Watch(speed=lambda: 10.0)
    watch.before()
    sum(range(1000))
    watch.after()
    block = watch.block([1.0, 1.0, 5.0], None, "cpu")
    assert block["stalls"] == 1
    assert block["speed_change"] == 0.0 and block["speed_moved"] is False
    if host.read_steal() is not None:
        assert block["steal_share"] is not None and block["involuntary_ctx_switches"] is not None


def test_steal_and_context_switches_from_counters():
    start = host.Snapshot(0.0, [100, 10_000], [5, 10, 1.0])
    end = host.Snapshot(2.0, [400, 20_000], [55, 12, 2.5])
    block = host.host_block([1.0] * 10, None, "cpu", start, end, 20.0, 26.0)
    assert block["steal_share"] == pytest.approx(0.03) and block["host_steal"] is True
    assert block["involuntary_ctx_switches"] == 50 and block["voluntary_ctx_switches"] == 2
    assert block["cpu_share"] == pytest.approx(0.75)
    assert block["speed_change"] == pytest.approx(0.3) and block["speed_moved"] is True
    assert host.flags(block) == ["launch_bound", "host_steal", "host_speed_moved"]


def test_read_steal_parses_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 0 20 300 5 0 1 7 0 0\ncpu0 1 2 3\n")
    assert host.read_steal(str(stat)) == [7, 343]
    assert host.read_steal(str(tmp_path / "missing")) is None


def test_speed_reference_is_tens_of_ms_at_most():
    times = iter(range(100))
    assert host.speed_reference(rounds=3, clock=lambda: next(times) / 1000.0) == pytest.approx(1.0)
