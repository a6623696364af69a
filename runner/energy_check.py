"""The energy counter checked against a second reading, for the GPU acceptance run and ``selftest``.

The second reading: NVML's power (``nvmlDeviceGetPowerUsage``, milliwatts) sampled during the
timed loop, averaged, times the loop's duration. The two agree within ``TOLERANCE`` when the
counter measures the loop: the power reading is itself an average over up to a second on recent
GPUs (A100, H100), so the check needs a loop of ``MIN_SECONDS`` or more and ``MIN_SAMPLES``
samples; a shorter one is skipped with the reason, never passed.

``PowerSampler`` is driven by whoever runs the loop: ``sample()`` by hand (tests) or ``running()``,
a background thread that samples every ``interval_s`` until the block ends.
"""
from __future__ import annotations

import contextlib
import statistics
import threading
from dataclasses import dataclass
from typing import List, Optional

TOLERANCE = 0.15       # |counter - samples| / samples
MIN_SECONDS = 5.0
MIN_SAMPLES = 10


@dataclass(frozen=True)
class EnergyCheck:
    status: str                     # "pass", "fail" or "skipped"
    counter_j: Optional[float]
    samples_j: Optional[float]      # mean sampled power x seconds
    relative_difference: Optional[float]
    tolerance: float
    reason: str

    def to_dict(self):
        return dict(self.__dict__)


def check_energy(counter_j, power_samples_w, seconds, tolerance=TOLERANCE) -> EnergyCheck:
    """The counter's energy (J) against mean(power samples, W) x seconds."""
    samples = [value for value in power_samples_w if value is not None]
    if counter_j is None:
        return EnergyCheck("skipped", None, None, None, tolerance, "no energy counter reading")
    if seconds < MIN_SECONDS or len(samples) < MIN_SAMPLES:
        return EnergyCheck("skipped", counter_j, None, None, tolerance,
                           f"needs a loop of {MIN_SECONDS:g} s or more and {MIN_SAMPLES} power samples "
                           f"(got {seconds:.2f} s, {len(samples)} samples)")
    samples_j = statistics.fmean(samples) * seconds
    difference = abs(counter_j - samples_j) / samples_j
    status = "pass" if difference <= tolerance else "fail"
    return EnergyCheck(status, counter_j, samples_j, difference, tolerance,
                       f"counter {counter_j:.1f} J, sampled power x duration {samples_j:.1f} J: "
                       f"{difference:.1%} apart (tolerance {tolerance:.0%})")


class PowerSampler:
    """NVML power readings (W) of one GPU, taken while the loop runs."""

    def __init__(self, nvml, handle, interval_s=0.05):
        self._nvml, self._handle, self.interval_s = nvml, handle, interval_s
        self.samples_w: List[float] = []

    def sample(self):
        try:
            self.samples_w.append(self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0)
        except Exception:
            pass   # one missed reading; too few leave the check skipped

    @contextlib.contextmanager
    def running(self):
        """Samples every interval_s on a thread until the block ends."""
        done = threading.Event()

        def loop():
            self.sample()                        # at least one reading, however short the block
            while not done.wait(self.interval_s):
                self.sample()

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            done.set()
            thread.join()


def checked_loop(run, counters, sampler, tolerance=TOLERANCE):
    """Run ``run()`` (the timed loop) between ``counters`` (runner.energy.LoopCounters) with
    ``sampler`` sampling power during it: (the counters' blocks, EnergyCheck)."""
    counters.start()
    with sampler.running():
        run()
    counted = counters.stop()
    energy = counted["energy"]
    return counted, check_energy(energy["energy_j"], sampler.samples_w, energy["loop_s"] or 0.0, tolerance)
