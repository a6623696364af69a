"""NVML readings around the timed loop, against a fake pynvml module.

The fake follows nvidia-ml-py's API (function names, handle-first arguments, milliwatts for
power, a bitmask of nvmlClocksThrottleReason* values, NVMLError on unsupported queries);
its numbers are made up, shaped like an A100-SXM4-40GB's (1410 MHz SM, 1215 MHz memory).
"""
import shutil
import types

import pynvml
import pytest

from runner import gpu_state


class NVMLError(Exception):
    pass


def fake_nvml(throttle_masks=(0x0,), power_mw=251_000, event_api=True, fail_init=False):
    masks = iter(throttle_masks)
    opened = []

    def init():
        if fail_init:
            raise NVMLError("NVML Shared Library Not Found")

    def handle_by_uuid(uuid):
        opened.append(uuid)
        return ("handle", uuid)

    def clock(handle, kind):
        return {pynvml.NVML_CLOCK_SM: 1410, pynvml.NVML_CLOCK_MEM: 1215}[kind]

    def power(handle):
        if power_mw is None:
            raise NVMLError("Not Supported")
        return power_mw

    module = types.SimpleNamespace(
        nvmlInit=init, nvmlDeviceGetHandleByUUID=handle_by_uuid,
        nvmlDeviceGetHandleByIndex=lambda index: ("handle", index),
        nvmlDeviceGetClockInfo=clock,
        nvmlDeviceGetTemperature=lambda handle, sensor: 41 if sensor == pynvml.NVML_TEMPERATURE_GPU else None,
        nvmlDeviceGetPowerUsage=power,
        nvmlDeviceGetUUID=lambda handle: b"GPU-6a3c3a2e-1f61-2b8a-6b55-0c9e8d2b9f10",
        opened=opened)
    reasons = lambda handle: next(masks)  # noqa: E731
    if event_api:
        module.nvmlDeviceGetCurrentClocksEventReasons = reasons
    else:
        module.nvmlDeviceGetCurrentClocksThrottleReasons = reasons
    return module


def test_bit_values_match_pynvml():
    assert gpu_state.THROTTLE_REASONS["sw_power_cap"] == pynvml.nvmlClocksThrottleReasonSwPowerCap
    assert gpu_state.THROTTLE_REASONS["hw_thermal_slowdown"] == pynvml.nvmlClocksThrottleReasonHwThermalSlowdown
    assert gpu_state.THROTTLE_REASONS["display_clock_setting"] == pynvml.nvmlClocksThrottleReasonDisplayClockSetting
    assert (gpu_state.NVML_CLOCK_SM, gpu_state.NVML_CLOCK_MEM) == (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM)


def test_sample_reads_clocks_temperature_power_and_reasons():
    nvml = fake_nvml(throttle_masks=(0x1 | 0x4,))
    monitor = gpu_state.open_monitor("cuda", visible_uuid="6a3c3a2e-1f61-2b8a-6b55-0c9e8d2b9f10", nvml=nvml)
    assert nvml.opened == ["GPU-6a3c3a2e-1f61-2b8a-6b55-0c9e8d2b9f10"]
    assert monitor.sample() == {"sm_clock_mhz": 1410, "mem_clock_mhz": 1215, "temperature_c": 41,
                                "power_w": 251.0, "throttle_reasons": ["gpu_idle", "sw_power_cap"]}
    assert monitor.uuid() == "GPU-6a3c3a2e-1f61-2b8a-6b55-0c9e8d2b9f10"


def test_old_api_name_and_unsupported_fields():
    monitor = gpu_state.open_monitor("cuda", nvml=fake_nvml(event_api=False, power_mw=None))
    sample = monitor.sample()
    assert sample["power_w"] is None
    assert sample["throttle_reasons"] == []


@pytest.mark.parametrize("masks, throttled", [
    ((0x0, 0x0), False),
    ((0x1, 0x1), False),          # idle between calls is no slowdown
    ((0x0, 0x20), True),          # software thermal slowdown by the end of the loop
    ((0x4, 0x0), True),           # power cap at the start
])
def test_throttled_flag(masks, throttled):
    monitor = gpu_state.open_monitor("cuda", nvml=fake_nvml(throttle_masks=masks))
    state = gpu_state.summarize(monitor.sample(), monitor.sample())
    assert state["throttled"] is throttled
    assert gpu_state.flags(state) == (["throttled"] if throttled else [])


def test_absent_nvml_or_cpu_gives_null():
    assert gpu_state.open_monitor("cpu", nvml=fake_nvml()) is None
    assert gpu_state.open_monitor("cuda", nvml=fake_nvml(fail_init=True)) is None
    if shutil.which("nvidia-smi") is None:   # the real pynvml, no driver: null, not an error
        assert gpu_state.open_monitor("cuda") is None
    assert gpu_state.summarize(None, None) is None
    assert gpu_state.flags(None) == []
