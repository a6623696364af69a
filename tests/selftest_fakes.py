"""A fake GPU for runner.selftest: torch.cuda's Event/synchronize/_sleep/CUDAGraph/graph and NVML,
on a simulated device clock. Kernels take exactly their known time (``_sleep``: cycles / the true
SM clock; a matmul: FLOPs / the true rate), so every check has a known right answer; the knobs
break one piece of the apparatus at a time.

A healthy GPU as the H100 of issue 30 behaved can be asked for too: ``ramp_s`` and ``idle_mhz`` make the
SM clock ramp linearly from ``idle_mhz`` to ``true_mhz`` over the first ``ramp_s`` seconds (a GPU idle for
minutes), every kernel (replays too) running at the clock of the moment it starts, and NVML reporting
that clock; ``matmul_setup_ms`` is the first matmul's one-off cost (cuBLAS's set-up)."""
import contextlib


class FakeCuda:
    def __init__(self, true_mhz=1980.0, tflops=700.0, event_scale=1.0, launch_ms=0.004, ramp_s=0.0,
                 idle_mhz=None, matmul_setup_ms=0.0):
        self.now_ms = 0.0
        self.ramp_s, self.idle_mhz, self.matmul_setup_ms = ramp_s, idle_mhz, matmul_setup_ms
        self.matmuls = 0
        self.true_mhz, self.tflops = true_mhz, tflops
        self.event_scale = event_scale      # < 1: events that under-measure (work on another stream)
        self.launch_ms = launch_ms
        self.capturing = None
        cuda = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self):
                self.at = cuda.now_ms

            def elapsed_time(self, end):
                return (end.at - self.at) * cuda.event_scale

        class CUDAGraph:
            def __init__(self):
                self.ops = []

            def capture_begin(self, *args, **kwargs):
                cuda.capturing = self

            def capture_end(self):
                cuda.capturing = None

            def replay(self):
                for op in self.ops:
                    op()

        self.Event, self.CUDAGraph = Event, CUDAGraph

    def synchronize(self):
        pass

    def current_mhz(self):
        """The true SM clock now: ramping over the first ramp_s seconds, then true_mhz."""
        seconds = self.now_ms / 1e3
        if self.ramp_s and self.idle_mhz and seconds < self.ramp_s:
            return self.idle_mhz + (self.true_mhz - self.idle_mhz) * seconds / self.ramp_s
        return self.true_mhz

    def _run(self, ms_at_full_clock):
        def op():   # at the clock of the moment it starts, launched eagerly or replayed
            self.now_ms += ms_at_full_clock * self.true_mhz / self.current_mhz() + self.launch_ms
        if self.capturing is not None:
            self.capturing.ops.append(op)
        else:
            op()

    def _sleep(self, cycles):
        self._run(cycles / (self.true_mhz * 1e3))

    def matmul(self, n):
        if self.matmuls == 0:
            self.now_ms += self.matmul_setup_ms
        self.matmuls += 1
        self._run(2 * n ** 3 / (self.tflops * 1e12) * 1e3)

    @contextlib.contextmanager
    def graph(self, graph):
        graph.capture_begin()
        try:
            yield
        finally:
            graph.capture_end()

    def wall_clock(self):
        return self.now_ms / 1e3


class FakeNvml:
    """NVML as runner.selftest reads it: the SM clock it reports and the total-energy counter."""

    def __init__(self, cuda, reported_mhz=None, watts=400.0, energy=True):
        """reported_mhz: the SM clock NVML reports; None: the true one of the moment."""
        self.cuda, self.reported_mhz, self.watts, self.energy = cuda, reported_mhz, watts, energy

    def sample(self):
        return {"sm_clock_mhz": self.reported_mhz or self.cuda.current_mhz(), "mem_clock_mhz": 2619.0,
                "temperature_c": 45.0, "power_w": self.watts, "throttle_reasons": []}

    def energy_mj(self):
        return int(123_456_789 + self.cuda.now_ms * self.watts) if self.energy else None


class FakeCpuMachine:
    """The CPU part's three clocks on a simulated machine of known truth. Every reading of a clock
    costs ``read_cost_s`` of this thread's CPU time. The thread gets ``share`` of the real time in
    time slices: after each ``slice_s`` of its CPU time, other processes run for
    ``slice_s * (1 / share - 1)`` (a loaded machine: share < 1). The timer under test runs at
    ``timer_rate`` times real time (1: sound)."""

    def __init__(self, share=1.0, timer_rate=1.0, read_cost_s=1e-5, slice_s=0.004):
        self.real_s, self.cpu_s = 0.0, 0.0
        self.share, self.timer_rate, self.read_cost_s, self.slice_s = share, timer_rate, read_cost_s, slice_s
        self._next_slice = slice_s

    def _tick(self):
        self.cpu_s += self.read_cost_s
        self.real_s += self.read_cost_s
        if self.cpu_s >= self._next_slice:
            self._next_slice += self.slice_s
            self.real_s += self.slice_s * (1 / self.share - 1)

    def timer(self):
        self._tick()
        return self.real_s * self.timer_rate

    def cpu(self):
        self._tick()
        return self.cpu_s

    def reference(self):
        self._tick()
        return self.real_s
