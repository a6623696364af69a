"""Energy and throttling during the timed loop, from cumulative counters read just around it.

Stdlib only. Each counter is read immediately before and immediately after the timed loop; the
record keeps the difference, never a reading of an idle GPU:

- GPU energy: NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``: millijoules
  since the driver loaded, an unsigned 64-bit integer; Volta and newer, else NVML answers
  Not Supported). The board's power, not the wall's.
- GPU throttling: NVML's violation times (``nvmlDeviceGetViolationStatus`` for the power and the
  thermal policy: a ``c_nvmlViolationTime_t`` whose ``violationTime`` counts the nanoseconds the
  clocks were held below the requested ones, and whose ``referenceTime`` is a microsecond stamp).
- CPU energy: the RAPL package zones of ``/sys/class/powercap`` (``intel-rapl:<n>`` named
  ``package-<n>``; ``energy_uj`` in microjoules, wrapping to 0 after ``max_energy_range_uj``).
  Most VMs expose none, and since Linux 5.10 ``energy_uj`` is readable by root only.

A counter that cannot be read leaves the record's numbers null with the reason. Resolution: the
counter's own step (1 mJ, 1 uJ) and how stale a reading can be (``UPDATE_INTERVAL_S``, an
assumption: NVML does not document how often the energy counter is refreshed) give ``max_error_j``;
a loop whose energy is within ten times that is marked ``uncertain``. Wraparound: an end below the
start is one wrap of the counter's range when the energy that implies is plausible
(``MAX_PLAUSIBLE_W``); otherwise the counter was reset (driver reload) and the energy is null.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

JSON = Dict[str, Any]

NVML_ERROR_NOT_SUPPORTED = 3            # nvml.h's NVML_ERROR_NOT_SUPPORTED
NVML_PERF_POLICY_POWER, NVML_PERF_POLICY_THERMAL = 0, 1   # nvmlPerfPolicyType_t
NVML_ENERGY_RANGE_MJ = 2 ** 64          # the counter is an unsigned long long
NVML_STEP_J = 0.001                     # millijoules
RAPL_STEP_J = 1e-6                      # microjoules
UPDATE_INTERVAL_S = 0.1                 # how stale a counter reading may be (assumed, see above)
UNCERTAIN_RATIO = 0.1                   # max_error_j above this share of the energy: uncertain
MAX_PLAUSIBLE_W = 5000.0                # no single GPU or CPU package draws more
POWERCAP_ROOT = "/sys/class/powercap"

NO_NVML = "no NVML on this host (pynvml missing or no NVIDIA driver)"
NO_ENERGY_COUNTER = ("this GPU has no total-energy counter (NVML: Not Supported; the counter needs a "
                     "Volta or newer GPU)")
NO_VIOLATION_COUNTER = "this GPU reports no violation times (NVML: Not Supported)"
NO_RAPL = ("no RAPL package zone under {root} (most VMs and containers expose none; on bare metal, "
           "load the intel_rapl_common module)")
RAPL_ROOT_ONLY = ("RAPL's energy_uj is readable by root only (Linux 5.10 and later); run as root or make "
                  "{path} readable")
STALLED = "the counter did not advance during the loop (shorter than the counter's update interval)"
RESET = "the counter went backwards by more than one wrap allows (driver reloaded?)"


class Unavailable(Exception):
    """A counter this host or GPU cannot read; the message is the record's reason."""


class Counter:
    """One cumulative energy counter: ``read()`` -> raw values (one per zone), in ``unit_j`` joules,
    each wrapping to 0 after its range."""

    source = ""
    unit_j = 1.0

    def read(self) -> List[int]:
        raise NotImplementedError

    def ranges(self) -> List[int]:
        raise NotImplementedError


class NvmlEnergy(Counter):
    """NVML's total-energy counter of one GPU (millijoules)."""

    source = "nvml_total_energy"
    unit_j = NVML_STEP_J

    def __init__(self, nvml, handle):
        self._nvml, self._handle = nvml, handle

    def read(self):
        try:
            return [int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))]
        except Exception as exc:
            raise Unavailable(nvml_reason(exc, NO_ENERGY_COUNTER)) from exc

    def ranges(self):
        return [NVML_ENERGY_RANGE_MJ]


class RaplEnergy(Counter):
    """The RAPL package zones of a powercap tree (microjoules), summed over the packages."""

    source = "rapl"
    unit_j = RAPL_STEP_J

    def __init__(self, zones: Sequence[Path]):
        self._zones = list(zones)

    def read(self):
        values = []
        for zone in self._zones:
            path = zone / "energy_uj"
            try:
                values.append(int(path.read_text().strip()))
            except PermissionError as exc:
                raise Unavailable(RAPL_ROOT_ONLY.format(path=path)) from exc
            except (OSError, ValueError) as exc:
                raise Unavailable(f"RAPL: cannot read {path} ({exc})") from exc
        return values

    def ranges(self):
        try:
            return [int((zone / "max_energy_range_uj").read_text().strip()) for zone in self._zones]
        except (OSError, ValueError) as exc:
            raise Unavailable(f"RAPL: cannot read max_energy_range_uj ({exc})") from exc


def rapl_zones(root=POWERCAP_ROOT) -> List[Path]:
    """The top-level package zones (``intel-rapl:<n>`` named ``package-<n>``): subzones (core, dram)
    are inside their package and ``psys`` overlaps the packages, so neither is added."""
    root = Path(root)
    if not root.is_dir():
        return []
    zones = []
    for zone in sorted(root.glob("intel-rapl:*")):
        if zone.name.count(":") != 1:
            continue
        try:
            name = (zone / "name").read_text().strip()
        except OSError:
            continue
        if name.startswith("package"):
            zones.append(zone)
    return zones


def nvml_reason(exc: BaseException, not_supported: str) -> str:
    if getattr(exc, "value", None) == NVML_ERROR_NOT_SUPPORTED:
        return not_supported
    return f"NVML: {exc}"


def counter_delta(start: int, end: int, span: int) -> Tuple[int, bool]:
    """Counter units between two readings of a counter wrapping to 0 after ``span``; (units, wrapped)."""
    if end >= start:
        return end - start, False
    return end + span - start, True


def energy_between(counter: Counter, start: Sequence[int], end: Sequence[int], seconds: float) -> JSON:
    """The record's ``timing.energy`` for two readings ``seconds`` apart."""
    wrapped, units = False, 0
    for first, last, span in zip(start, end, counter.ranges()):
        delta, wrap = counter_delta(first, last, span)
        units, wrapped = units + delta, wrapped or wrap
    energy_j = units * counter.unit_j
    if wrapped and energy_j > MAX_PLAUSIBLE_W * max(seconds, UPDATE_INTERVAL_S):
        return unavailable(counter.source, seconds, RESET)
    if units == 0:
        return unavailable(counter.source, seconds, STALLED)
    power_w = energy_j / seconds if seconds > 0 else None
    max_error_j = counter.unit_j * len(start) + 2 * UPDATE_INTERVAL_S * (power_w or 0.0)
    return {"source": counter.source, "energy_j": energy_j, "loop_s": seconds, "average_power_w": power_w,
            "max_error_j": max_error_j, "uncertain": max_error_j > UNCERTAIN_RATIO * energy_j,
            "wrapped": wrapped, "reason": None}


def unavailable(source: Optional[str], seconds: Optional[float], reason: str) -> JSON:
    return {"source": source, "energy_j": None, "loop_s": seconds, "average_power_w": None,
            "max_error_j": None, "uncertain": None, "wrapped": None, "reason": reason}


class Violations:
    """NVML's power and thermal violation times of one GPU."""

    POLICIES = {"power": NVML_PERF_POLICY_POWER, "thermal": NVML_PERF_POLICY_THERMAL}

    def __init__(self, nvml, handle):
        self._nvml, self._handle = nvml, handle

    def read(self) -> Dict[str, Tuple[int, int]]:
        """{policy: (violation ns, reference stamp us)}; Unavailable when NVML has none."""
        found = {}
        for name, policy in self.POLICIES.items():
            try:
                value = self._nvml.nvmlDeviceGetViolationStatus(self._handle, policy)
            except Exception as exc:
                raise Unavailable(nvml_reason(exc, NO_VIOLATION_COUNTER)) from exc
            found[name] = (int(value.violationTime), int(value.referenceTime))
        return found


def violations_between(start: Dict[str, Tuple[int, int]], end: Dict[str, Tuple[int, int]]) -> JSON:
    """The record's ``timing.violations``: ms the power and thermal limits held the clocks down
    during the loop (ns counters, so sub-microsecond resolution), and the ms NVML's stamps cover."""
    block: JSON = {f"{name}_ms": max(end[name][0] - start[name][0], 0) / 1e6 for name in start}
    block["counted_ms"] = max(end["power"][1] - start["power"][1], 0) / 1e3
    block["reason"] = None
    return block


def no_violations(reason: str) -> JSON:
    return {"power_ms": None, "thermal_ms": None, "counted_ms": None, "reason": reason}


def throttled(violations: Optional[JSON]) -> bool:
    """Did a power or thermal limit hold the clocks down for any of the loop?"""
    if not violations:
        return False
    return any((violations.get(key) or 0) > 0 for key in ("power_ms", "thermal_ms"))


# The shortest loop whose energy figure's stated error (max_error_j: 2 x UPDATE_INTERVAL_S of power, the
# counter's step aside) stays under UNCERTAIN_RATIO: 2 s; the timed loop's automatic minimum duration
# (settings.min_time_s "auto") adds a quarter for the counter's step and the edges.
ENERGY_MIN_S = 1.25 * 2 * UPDATE_INTERVAL_S / UNCERTAIN_RATIO


class LoopCounters:
    """Reads the counters just before (``start``) and just after (``stop``) the timed loop."""

    @property
    def has_energy(self) -> bool:
        """An energy counter is open (its figure wants a loop of at least ENERGY_MIN_S)."""
        return self._energy is not None

    def __init__(self, energy: Optional[Counter], violations: Optional[Violations] = None,
                 energy_reason: Optional[str] = None, violations_reason: Optional[str] = None,
                 clock: Callable[[], float] = time.monotonic):
        self._energy, self._violations, self._clock = energy, violations, clock
        self._reasons = {"energy": energy_reason, "violations": violations_reason}
        self._start: JSON = {}

    def start(self):
        self._start = {"energy": _try(self._energy), "violations": _try(self._violations)}
        self._start["at"] = self._clock()

    def stop(self) -> JSON:
        """{"energy": timing.energy, "violations": timing.violations (None on CPU)}."""
        at = self._clock()
        seconds = at - self._start["at"]
        return {"energy": self._energy_block(_try(self._energy), seconds),
                "violations": self._violation_block(_try(self._violations))}

    def _energy_block(self, end, seconds):
        begin = self._start["energy"]
        if self._energy is None:
            return unavailable(None, seconds, self._reasons["energy"] or NO_NVML)
        for reading in (begin, end):
            if isinstance(reading, Unavailable):
                return unavailable(self._energy.source, seconds, str(reading))
        try:
            return energy_between(self._energy, begin, end, seconds)
        except Unavailable as exc:
            return unavailable(self._energy.source, seconds, str(exc))

    def _violation_block(self, end):
        if self._violations is None:
            reason = self._reasons["violations"]
            return no_violations(reason) if reason else None
        begin = self._start["violations"]
        for reading in (begin, end):
            if isinstance(reading, Unavailable):
                return no_violations(str(reading))
        return violations_between(begin, end)


def _try(counter):
    if counter is None:
        return None
    try:
        return counter.read()
    except Unavailable as exc:
        return exc


def open_counters(device: str, nvml=None, handle=None, powercap_root=POWERCAP_ROOT,
                  clock: Callable[[], float] = time.monotonic) -> LoopCounters:
    """The loop's counters: on GPU NVML's (``nvml``/``handle`` from runner.gpu_state's monitor;
    None without NVML), on CPU the RAPL package zones."""
    if device == "cuda":
        if nvml is None:
            return LoopCounters(None, None, NO_NVML, NO_NVML, clock=clock)
        return LoopCounters(NvmlEnergy(nvml, handle), Violations(nvml, handle), clock=clock)
    zones = rapl_zones(powercap_root)
    if not zones:
        return LoopCounters(None, energy_reason=NO_RAPL.format(root=powercap_root), clock=clock)
    return LoopCounters(RaplEnergy(zones), clock=clock)
