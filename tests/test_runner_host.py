"""runner.host (issue 32 item 1): the host's part of a number, on the real H100 records and on a simulation
fitted to them; the CUDA loop's launch timer against a fake GPU; old records read with unknown fields."""
import random

import pytest

from runner import host
from runner.schema import read_record
from runner.timing import time_iterations
from tests.hostsim import REPO_EVIDENCE as EVIDENCE
from tests.hostsim import FakeCuda, load, timelines
from tests.hostsim import fit_loop as fit
from tests.hostsim import simulate_loop as simulate


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


# --- issue 32 items 2 and 4: paired blocks, the loop's minimum duration and noise stop -------------------------

def test_paired_blocks_alternate_and_keep_per_block_times():
    from runner.cell import PAIRED_BLOCKS, paired_blocks
    from runner.timing import TimedLoop

    order = []

    def fake_loop(step, calls, device):
        order.append(step())
        per_call = 4.0 if order[-1] == "eager" else 2.0
        return TimedLoop.of([per_call] * calls, None, per_call * calls, [per_call] * calls)

    paired = paired_blocks(lambda: "eager", lambda: "compiled", 300, "cpu", 0, time_loop=fake_loop)
    assert paired["blocks"] == PAIRED_BLOCKS and paired["block_calls"] == 300 // PAIRED_BLOCKS
    assert [p["first"] for p in paired["pairs"][:2]] == ["eager", "compiled"]
    assert order[:4] == ["eager", "compiled", "compiled", "eager"]
    assert paired["speedup_median"] == 2.0 == paired["speedup_median_of_medians"]
    assert all(p["eager_ms"] == 4.0 and p["compiled_ms"] == 2.0 for p in paired["pairs"])


def test_paired_blocks_on_a_fake_gpu_give_launch_and_event_times():
    from runner.cell import paired_blocks

    cuda = FakeCuda()
    eager = cuda.step_for([4.0] * 10_000, [2.0] * 10_000)          # launch-bound: 4 ms of launches, 2 of work
    compiled = cuda.step_for([0.05] * 10_000, [0.6] * 10_000)      # a CUDA graph: the host is out of the loop

    def loop(step, calls, device):
        return time_iterations(step, calls, device, cuda=cuda, clock=cuda.clock)

    paired = paired_blocks(eager, compiled, 100, "cpu", 0, time_loop=lambda s, c, d: loop(s, c, "cuda"))
    pair = paired["pairs"][0]
    assert pair["eager_ms"] == pytest.approx(4.0) and pair["compiled_ms"] == pytest.approx(0.6, rel=0.1)
    assert pair["eager_launch_ms"] == pytest.approx(4.0) and pair["compiled_launch_ms"] == pytest.approx(0.05)


def test_min_time_extends_the_loop_and_keeps_the_first_n():
    from runner.timing import extend_loop, extended_block

    cuda = FakeCuda()
    step = cuda.step_for([0.05] * 100_000, [0.6] * 100_000)   # the H100's 0.6 ms reduce-overhead ResNet
    first = time_iterations(step, 300, "cuda", cuda=cuda, clock=cuda.clock)
    assert first.loop_wall_ms < 200                           # 0.18 s: too short for NVML's energy counter

    def loop(s, calls, device):
        return time_iterations(s, calls, device, cuda=cuda, clock=cuda.clock)

    extra, reason = extend_loop(step, first, "cuda", min_time_s=2.5, time_loop=loop)
    block = extended_block(first, extra, reason, None, 2.5)
    assert reason == "min_time" and block["loop_s"] >= 2.5 and block["n"] > 4000
    assert block["extra_calls"] == block["n"] - 300 and len(block["extra_samples_ms"]) == block["extra_calls"]
    from runner import energy

    power = 300.0   # any: the stated error is 2 x UPDATE_INTERVAL_S of power, the counter's step aside
    error = energy.NVML_STEP_J + 2 * energy.UPDATE_INTERVAL_S * power
    assert error / (power * block["loop_s"]) < energy.UNCERTAIN_RATIO
    assert error / (power * first.loop_wall_ms / 1000.0) > energy.UNCERTAIN_RATIO   # the seed's loop alone: not


def test_noise_criterion_stops_a_quiet_loop_early_and_a_noisy_one_at_the_cap():
    from runner.timing import TimedLoop, extend_loop

    rng = random.Random(3)
    fitted = _resnet_fit()

    def fake(noisy):
        def loop(step, calls, device):
            samples, _ = simulate(fitted, calls, rng, stall_rate=0.05 if noisy else 0.0)
            if not noisy:
                samples = [4.0 + 0.001 * rng.random() for _ in samples]
            return TimedLoop.of(samples, None, sum(samples))
        return loop

    for noisy, expect in ((False, "iterations"), (True, "max_time")):
        first = fake(noisy)(None, 300, "cpu")
        extra, reason = extend_loop(None, first, "cpu", 0.0, 0.001, 3.0, time_loop=fake(noisy))
        assert reason == expect
        assert (extra is None) == (not noisy)


def test_min_time_auto_needs_an_energy_counter():
    from runner import energy
    from runner.cell import loop_min_time_s

    class Counters:
        has_energy = True

    assert loop_min_time_s("auto", Counters()) == energy.ENERGY_MIN_S >= 2.0
    assert loop_min_time_s("auto", object()) == 0.0
    assert loop_min_time_s(1.5, Counters()) == 1.5


def test_the_cells_timed_loop_on_a_fake_gpu_with_an_energy_counter(monkeypatch):
    """runner.cell's GPU path end to end on fakes built from the evidence: a 0.6 ms CUDA-graph step (the H100's
    ResNet reduce-overhead), an NVML energy counter open, so min_time_s auto extends the 300 calls to
    energy.ENERGY_MIN_S; the energy covers every call; the host block reads the launch times."""
    from runner import cell as cell_module
    from runner import energy
    from runner import timing as timing_module

    cuda = FakeCuda()
    step = cuda.step_for([0.05] * 100_000, [0.6] * 100_000)

    class FakeNvmlEnergy:
        source, unit_j = "nvml_total_energy", energy.NVML_STEP_J

        def read(self):
            return [int(cuda.gpu * 300_000)]    # 300 W on the fake GPU clock, in mJ

        def ranges(self):
            return [energy.NVML_ENERGY_RANGE_MJ]

    monkeypatch.setattr(cell_module.gpu_state, "open_monitor", lambda device, visible_uuid=None: None)
    monkeypatch.setattr(cell_module.energy, "open_counters", lambda *a, **k: energy.LoopCounters(
        FakeNvmlEnergy(), None, violations_reason="fake", clock=cuda.clock))
    monkeypatch.setattr(cell_module, "time_iterations",
                        lambda s, n, device: time_iterations(s, n, "cuda", cuda=cuda, clock=cuda.clock))
    monkeypatch.setattr(cell_module, "extend_loop", lambda *a, **k: timing_module.extend_loop(
        *a, **k, time_loop=lambda s, n, d: time_iterations(s, n, "cuda", cuda=cuda, clock=cuda.clock)))
    marks = {}
    job = {"environment": {}, "settings": {"min_time_s": "auto", "target_stdrel": None, "max_time_s": 10.0}}
    ticks = iter(range(1000, 10**9, 1000))   # a quiet host: no steal (this machine's own /proc/stat steals under load)
    watch = host.Watch(speed=lambda: 5.0, snap=lambda: host.snapshot(read=lambda: [0, next(ticks)]))
    loop, state, counted = cell_module._timed_loop(step, 300, "cuda", job, None, marks, None, watch)
    extended = marks["extended"]
    assert len(loop.samples_ms) == 300 and extended["stop"] == "min_time"
    assert extended["loop_s"] >= energy.ENERGY_MIN_S and counted["energy"]["calls"] == extended["n"] > 4000
    assert counted["energy"]["uncertain"] is False
    block = cell_module.host_record(watch, loop, "cuda", extended["extra_samples_ms"], marks["extra_launch_ms"])
    assert block["launch_bound"] is False and block["launch_bound_share"] < 0.2
    assert len(block["launch_samples_ms"]) == extended["n"] and block["marks"] == []
    assert loop.output is None   # the fake step returns None: the extension's last output
    # a noise criterion met at once: no call past the first N, and still an output for the accuracy check
    outputs = iter(range(10_000))
    marks = {}
    job["settings"] = {"min_time_s": 0, "target_stdrel": 1.0, "max_time_s": 10.0}
    loop, _, _ = cell_module._timed_loop(lambda: step() or next(outputs), 300, "cuda", job, None, marks, None, watch)
    assert marks["extended"]["stop"] == "iterations" and marks["extended"]["n"] == 300 and loop.output == 300
