"""A fake GPU for runner.selftest: torch.cuda's Event/synchronize/_sleep/CUDAGraph/graph and NVML,
on a simulated device clock. Kernels take exactly their known time (``_sleep``: cycles / the true
SM clock; a matmul: FLOPs / the true rate), so every check has a known right answer; the knobs
break one piece of the apparatus at a time."""
import contextlib


class FakeCuda:
    def __init__(self, true_mhz=1980.0, tflops=700.0, event_scale=1.0, launch_ms=0.004):
        self.now_ms = 0.0
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

    def _run(self, ms):
        def op():
            self.now_ms += ms + self.launch_ms
        if self.capturing is not None:
            self.capturing.ops.append(op)
        else:
            op()

    def _sleep(self, cycles):
        self._run(cycles / (self.true_mhz * 1e3))

    def matmul(self, n):
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

    def __init__(self, cuda, reported_mhz=1980.0, watts=400.0, energy=True):
        self.cuda, self.reported_mhz, self.watts, self.energy = cuda, reported_mhz, watts, energy

    def sample(self):
        return {"sm_clock_mhz": self.reported_mhz, "mem_clock_mhz": 2619.0, "temperature_c": 45.0,
                "power_w": self.watts, "throttle_reasons": []}

    def energy_mj(self):
        return int(123_456_789 + self.cuda.now_ms * self.watts) if self.energy else None
