"""The loop's energy and violation counters (runner.energy), against a fake NVML and a fake powercap tree.

The fake NVML follows nvidia-ml-py: ``nvmlDeviceGetTotalEnergyConsumption`` returns an int of
millijoules (a c_uint64's value), ``nvmlDeviceGetViolationStatus`` a real ``c_nvmlViolationTime_t``
(violationTime in ns, referenceTime in us), ``nvmlDeviceGetPowerUsage`` milliwatts, and an
unsupported query raises pynvml's own ``NVMLError_NotSupported``. The fake GPU draws a made-up
constant power on a fake clock; every expected number below is worked out by hand.
"""
import pynvml
import pytest

from runner import energy, gpu_state


class FakeClock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


class FakeGpu:
    """A GPU drawing ``watts`` on ``clock``; its counters advance when ``run(seconds)`` is called."""

    def __init__(self, clock, watts=300.0, energy_mj=5_000_000, energy=True, violations=True,
                 power_cap_fraction=0.0):
        self.clock, self.watts, self.energy_mj = clock, watts, energy_mj
        self.has_energy, self.has_violations = energy, violations
        self.power_ns, self.thermal_ns, self.reference_us = 7_000_000_000, 0, 1_700_000_000_000_000
        self.power_cap_fraction = power_cap_fraction

    def run(self, seconds):
        self.clock.now += seconds
        self.energy_mj = (self.energy_mj + round(self.watts * seconds * 1000)) % 2 ** 64
        self.power_ns += round(self.power_cap_fraction * seconds * 1e9)
        self.reference_us += round(seconds * 1e6)

    # nvidia-ml-py's API
    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.has_energy:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.energy_mj

    def nvmlDeviceGetViolationStatus(self, handle, policy):
        if not self.has_violations:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        value = pynvml.c_nvmlViolationTime_t()
        value.referenceTime = self.reference_us
        value.violationTime = {pynvml.NVML_PERF_POLICY_POWER: self.power_ns,
                               pynvml.NVML_PERF_POLICY_THERMAL: self.thermal_ns}[policy]
        return value

    def nvmlDeviceGetPowerUsage(self, handle):
        return int(self.watts * 1000)


def measure(gpu, seconds, clock):
    counters = energy.open_counters("cuda", gpu, "handle", clock=clock)
    counters.start()
    gpu.run(seconds)
    return counters.stop()


def test_constants_match_pynvml():
    assert energy.NVML_ERROR_NOT_SUPPORTED == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert energy.NVML_PERF_POLICY_POWER == pynvml.NVML_PERF_POLICY_POWER
    assert energy.NVML_PERF_POLICY_THERMAL == pynvml.NVML_PERF_POLICY_THERMAL
    assert isinstance(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED), pynvml.NVMLError_NotSupported)


def test_energy_and_power_over_the_loop():
    clock = FakeClock()
    counted = measure(FakeGpu(clock, watts=250.0), 4.0, clock)
    block = counted["energy"]
    # 250 W for 4 s = 1000 J = 1,000,000 mJ
    assert block["energy_j"] == pytest.approx(1000.0)
    assert block["average_power_w"] == pytest.approx(250.0)
    assert block["loop_s"] == pytest.approx(4.0)
    assert block["source"] == "nvml_total_energy" and block["reason"] is None and block["wrapped"] is False
    # 1 mJ step + 2 x 0.1 s x 250 W = 50.001 J, within 10% of 1000 J
    assert block["max_error_j"] == pytest.approx(50.001)
    assert block["uncertain"] is False
    assert counted["violations"] == {"power_ms": 0.0, "thermal_ms": 0.0, "counted_ms": 4000.0, "reason": None}


def test_short_loop_is_uncertain_and_a_stalled_counter_is_null():
    clock = FakeClock()
    short = measure(FakeGpu(clock, watts=100.0), 0.5, clock)["energy"]
    # 50 J measured; error bound 0.001 + 2 x 0.1 x 100 = 20.001 J > 5 J
    assert short["energy_j"] == pytest.approx(50.0) and short["uncertain"] is True
    gpu = FakeGpu(clock, watts=0.0)
    stalled = measure(gpu, 0.02, clock)["energy"]
    assert stalled["energy_j"] is None and stalled["reason"] == energy.STALLED


def test_nvml_counter_wraps_at_2_to_the_64():
    clock = FakeClock()
    gpu = FakeGpu(clock, watts=300.0, energy_mj=2 ** 64 - 400)
    block = measure(gpu, 2.0, clock)["energy"]
    # 300 W x 2 s = 600 J = 600,000 mJ: from 2^64 - 400 to 599,600
    assert gpu.energy_mj == 599_600
    assert block["energy_j"] == pytest.approx(600.0) and block["wrapped"] is True


def test_counter_reset_is_null_not_a_huge_number():
    clock = FakeClock()
    gpu = FakeGpu(clock, energy_mj=9_000_000)
    counters = energy.open_counters("cuda", gpu, "handle", clock=clock)
    counters.start()
    clock.now += 1.0
    gpu.energy_mj = 1_000       # the driver reloaded: the counter restarted near 0
    block = counters.stop()["energy"]
    assert block["energy_j"] is None and block["reason"] == energy.RESET


def test_gpu_without_counters_records_null_and_why():
    clock = FakeClock()
    counted = measure(FakeGpu(clock, energy=False, violations=False), 3.0, clock)
    assert counted["energy"]["energy_j"] is None and counted["energy"]["average_power_w"] is None
    assert counted["energy"]["reason"] == energy.NO_ENERGY_COUNTER
    assert counted["violations"]["power_ms"] is None
    assert counted["violations"]["reason"] == energy.NO_VIOLATION_COUNTER


def test_other_nvml_errors_are_named():
    clock = FakeClock()
    gpu = FakeGpu(clock)

    def lost(handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    gpu.nvmlDeviceGetTotalEnergyConsumption = lost
    block = measure(gpu, 1.0, clock)["energy"]
    assert block["energy_j"] is None and block["reason"].startswith("NVML: ") and block["reason"] == "NVML: GPU is lost"


def test_no_nvml_on_a_cuda_host():
    counted = energy.open_counters("cuda", None, None, clock=FakeClock())
    counted.start()
    result = counted.stop()
    assert result["energy"]["reason"] == energy.NO_NVML and result["violations"]["reason"] == energy.NO_NVML


def test_violation_time_flags_the_cell_throttled():
    clock = FakeClock()
    counted = measure(FakeGpu(clock, power_cap_fraction=0.25), 2.0, clock)
    # capped a quarter of 2 s: 500 ms of power violation
    assert counted["violations"]["power_ms"] == pytest.approx(500.0)
    assert energy.throttled(counted["violations"]) is True
    calm_edges = {"start": {}, "end": {}, "throttled": False}
    assert gpu_state.flags(calm_edges, counted["violations"]) == ["throttled"]
    assert gpu_state.flags(calm_edges, {"power_ms": 0.0, "thermal_ms": 0.0}) == []
    assert gpu_state.flags(None, None) == []


def rapl_tree(root, zones):
    """A powercap tree: {dir name: (name, energy_uj, max_energy_range_uj)}."""
    for folder, (name, value, span) in zones.items():
        zone = root / folder
        zone.mkdir(parents=True)
        (zone / "name").write_text(name + "\n")
        (zone / "energy_uj").write_text(f"{value}\n")
        (zone / "max_energy_range_uj").write_text(f"{span}\n")
    return root


def set_energy(root, folder, value):
    (root / folder / "energy_uj").write_text(f"{value}\n")


def test_rapl_sums_the_packages_and_handles_wraparound(tmp_path):
    span = 262_143_328_850
    root = rapl_tree(tmp_path, {
        "intel-rapl:0": ("package-0", span - 1_000_000, span),
        "intel-rapl:1": ("package-1", 5_000_000, span),
        "intel-rapl:0:0": ("core", 10, span),          # inside package 0: not added again
        "intel-rapl:2": ("psys", 10, span),            # the platform: overlaps the packages
    })
    assert [zone.name for zone in energy.rapl_zones(root)] == ["intel-rapl:0", "intel-rapl:1"]
    clock = FakeClock()
    counters = energy.open_counters("cpu", powercap_root=root, clock=clock)
    counters.start()
    clock.now += 2.0
    set_energy(root, "intel-rapl:0", 29_000_000)   # wrapped: 1,000,000 + 29,000,000 uJ = 30 J
    set_energy(root, "intel-rapl:0:0", 999)
    set_energy(root, "intel-rapl:1", 15_000_000)   # 10 J
    counted = counters.stop()
    block = counted["energy"]
    assert block["source"] == "rapl" and block["wrapped"] is True
    assert block["energy_j"] == pytest.approx(40.0) and block["average_power_w"] == pytest.approx(20.0)
    assert counted["violations"] is None


def test_no_rapl_or_root_only_rapl_is_null_with_the_reason(tmp_path):
    counters = energy.open_counters("cpu", powercap_root=tmp_path / "absent", clock=FakeClock())
    counters.start()
    block = counters.stop()["energy"]
    assert block["energy_j"] is None and "no RAPL package zone" in block["reason"]
    root = rapl_tree(tmp_path / "powercap", {"intel-rapl:0": ("package-0", 100, 1000)})
    counters = energy.open_counters("cpu", powercap_root=root, clock=FakeClock())
    (root / "intel-rapl:0" / "energy_uj").chmod(0)
    try:
        counters.start()
        block = counters.stop()["energy"]
    finally:
        (root / "intel-rapl:0" / "energy_uj").chmod(0o644)
    import os
    if os.geteuid() != 0:    # root reads a mode-0 file anyway
        assert block["energy_j"] is None and "root only" in block["reason"]

