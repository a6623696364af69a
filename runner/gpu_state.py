"""The GPU's state around a cell's timed loop, read through NVML (``nvidia-ml-py``).

SM and memory clocks, temperature, power and clock-throttle reasons, read once before
and once after the timed loop (never inside it). ``pynvml`` is optional: without it, or
without a driver, every field is null. A cell that throttled (power cap, thermal or
hardware slowdown at either end, or any power/thermal violation time counted during the loop,
runner.energy) is flagged ``throttled``: its latency is not the GPU's steady state.
"""

from runner import energy

# nvmlClocksThrottleReason* bit values (nvml.h; the same in every driver since R340).
THROTTLE_REASONS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
# The reasons that mean the GPU ran slower than it could: power and thermal limits.
SLOWDOWNS = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
             "hw_power_brake_slowdown")
FIELDS = ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w", "throttle_reasons")
NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0   # nvml.h enum values


class GpuMonitor:
    """Samples one GPU through an NVML module (pynvml, or a fake in tests)."""

    def __init__(self, nvml, handle):
        self._nvml = nvml
        self._handle = handle

    @property
    def nvml(self):
        """The NVML module and this GPU's handle, for the loop's counters (runner.energy)."""
        return self._nvml

    @property
    def handle(self):
        return self._handle

    def sample(self):
        """One reading; a field NVML cannot give (old driver, MIG slice) is None."""
        return {
            "sm_clock_mhz": self._ask("nvmlDeviceGetClockInfo", NVML_CLOCK_SM),
            "mem_clock_mhz": self._ask("nvmlDeviceGetClockInfo", NVML_CLOCK_MEM),
            "temperature_c": self._ask("nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU),
            "power_w": _scaled(self._ask("nvmlDeviceGetPowerUsage"), 1000.0),
            "throttle_reasons": _reason_names(self._throttle_mask()),
        }

    def uuid(self):
        value = self._ask("nvmlDeviceGetUUID")
        return value.decode() if isinstance(value, bytes) else value

    def _throttle_mask(self):
        # Renamed "clocks event reasons" in NVML 12.2; the old name stays as an alias.
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            if hasattr(self._nvml, name):
                return self._ask(name)
        return None

    def _ask(self, function, *args):
        try:
            return getattr(self._nvml, function)(self._handle, *args)
        except Exception:
            return None


def open_monitor(device, visible_uuid=None, index=0, nvml=None):
    """A GpuMonitor for the cell's GPU, or None (CPU, no pynvml, no driver).

    visible_uuid: the UUID torch reports for its device 0 (NVML's indices ignore
    CUDA_VISIBLE_DEVICES, so the UUID is the reliable way to the same GPU).
    """
    if device != "cuda":
        return None
    try:
        nvml = nvml or _import_pynvml()
        nvml.nvmlInit()
        if visible_uuid:
            handle = nvml.nvmlDeviceGetHandleByUUID(_nvml_uuid(visible_uuid))
        else:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None
    return GpuMonitor(nvml, handle)


def summarize(start, end):
    """The record's ``gpu_state``: both readings and whether either shows a slowdown."""
    if start is None or end is None:
        return None
    throttled = any(reason in SLOWDOWNS for sample in (start, end)
                    for reason in (sample["throttle_reasons"] or ()))
    return {"start": start, "end": end, "throttled": throttled}


def flags(gpu_state, violations=None):
    """["throttled"] when either edge reading shows a slowdown or NVML's violation counters
    (runner.energy) counted power or thermal capping during the loop."""
    edges = bool(gpu_state and gpu_state["throttled"])
    return ["throttled"] if edges or energy.throttled(violations) else []


def _import_pynvml():
    import pynvml

    return pynvml


def _nvml_uuid(uuid):
    """NVML wants "GPU-<uuid>"; torch's uuid property has no prefix."""
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else "GPU-" + text


def _reason_names(mask):
    if mask is None:
        return None
    return [name for name, bit in THROTTLE_REASONS.items() if mask & bit]


def _scaled(value, divisor):
    return None if value is None else value / divisor
