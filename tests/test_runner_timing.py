import statistics

import pytest

from runner.timing import flags, percentile, self_check, summarize, time_iterations


def test_percentile_interpolates_like_numpy_linear():
    values = [float(v) for v in range(1, 11)]   # numpy.percentile(1..10, 90) == 9.1
    assert percentile(values, 90) == pytest.approx(9.1)
    assert percentile(values, 50) == pytest.approx(5.5)
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 10.0
    assert percentile([4.0], 99) == 4.0


def test_summarize_statistics():
    samples = [3.0, 1.0, 2.0, 10.0]
    stats = summarize(samples, cv_threshold=0.1)
    assert stats["n"] == 4
    assert stats["mean_ms"] == pytest.approx(4.0)
    assert stats["median_ms"] == pytest.approx(2.5)
    assert stats["stdev_ms"] == pytest.approx(statistics.stdev(samples))
    assert (stats["min_ms"], stats["max_ms"]) == (1.0, 10.0)
    assert stats["cv"] == pytest.approx(statistics.stdev(samples) / 4.0)
    assert stats["noisy"] is True
    assert stats["samples_ms"] == samples   # raw order kept


def test_summarize_steady_samples_are_not_noisy():
    stats = summarize([5.0, 5.1, 4.9, 5.0], cv_threshold=0.1)
    assert stats["noisy"] is False
    assert summarize([2.0], 0.1)["stdev_ms"] == 0.0


def test_time_iterations_cpu_returns_one_sample_per_call_and_last_output():
    calls = []

    def step():
        calls.append(None)
        return len(calls)

    samples, output, loop_wall_ms = time_iterations(step, 5, "cpu")
    assert len(samples) == 5 and all(s >= 0 for s in samples)
    assert output == 5
    assert loop_wall_ms >= sum(samples)


def test_time_iterations_measures_milliseconds():
    import time

    samples, _, loop_wall_ms = time_iterations(lambda: time.sleep(0.01), 3, "cpu")
    assert all(9.0 <= s < 200.0 for s in samples)
    check = self_check(statistics.fmean(samples), loop_wall_ms, 3)
    assert check["timer_mismatch"] is False     # on CPU the wall clock and perf_counter agree
    assert check["wall_mean_ms"] == pytest.approx(statistics.fmean(samples), rel=0.05)


def test_one_output_alive_at_a_time_on_cpu():
    alive = [0]

    class Output:
        def __init__(self):
            alive[0] += 1

        def __del__(self):
            alive[0] -= 1

    peaks = []
    time_iterations(lambda: peaks.append(alive[0]) or Output(), 4, "cpu")
    assert peaks == [0, 0, 0, 0]   # the previous output was gone before each call


class FakeGpu:
    """A host and one GPU stream in simulated time (seconds), shaped like torch.cuda:
    ``Event(enable_timing=True)`` with ``record()`` and ``elapsed_time(end)`` in ms, and
    ``synchronize()``. A kernel launch costs the host ``launch_s`` and queues ``kernel_s`` of
    GPU work; an event completes when the stream reaches it."""

    def __init__(self, kernel_s, launch_s=5e-6):
        self.kernel_s, self.launch_s = kernel_s, launch_s
        self.host = 0.0
        self.stream_free = 0.0
        self.other_stream_free = 0.0
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing
                self.at = None

            def record(self):
                gpu.host += 2e-6
                self.at = max(gpu.host, gpu.stream_free)

            def elapsed_time(self, end):
                return (end.at - self.at) * 1000.0

        self.Event = Event

    def synchronize(self):
        self.host = max(self.host, self.stream_free, self.other_stream_free)

    def clock(self):
        return self.host

    def launch(self, stream_is_timed=True):
        self.host += self.launch_s
        if stream_is_timed:
            self.stream_free = max(self.host, self.stream_free) + self.kernel_s
        else:
            self.other_stream_free = max(self.host, self.other_stream_free) + self.kernel_s


@pytest.mark.parametrize("kernel_s, launch_s", [(5e-3, 5e-6), (1e-5, 1e-3)])
def test_cuda_events_and_wall_clock_agree_gpu_bound_or_launch_bound(kernel_s, launch_s):
    gpu = FakeGpu(kernel_s, launch_s)
    samples, _, loop_wall_ms = time_iterations(gpu.launch, 50, "cuda", cuda=gpu, clock=gpu.clock)
    mean = statistics.fmean(samples)
    assert mean == pytest.approx(max(kernel_s, launch_s) * 1000.0, rel=0.05)
    check = self_check(mean, loop_wall_ms, 50)
    assert check["timer_mismatch"] is False and flags(check) == []


def test_work_the_events_do_not_see_is_flagged():
    """The model's work on another stream than the events': they time nothing, the wall clock 5 ms."""
    gpu = FakeGpu(5e-3)

    step = lambda: gpu.launch(stream_is_timed=False)  # noqa: E731
    samples, _, loop_wall_ms = time_iterations(step, 20, "cuda", cuda=gpu, clock=gpu.clock)
    check = self_check(statistics.fmean(samples), loop_wall_ms, 20)
    assert check["timer_mismatch"] is True and flags(check) == ["timer_mismatch"]
