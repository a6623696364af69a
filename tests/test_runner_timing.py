import statistics

import pytest

from runner.timing import percentile, summarize, time_iterations


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

    samples, output = time_iterations(step, 5, "cpu")
    assert len(samples) == 5 and all(s >= 0 for s in samples)
    assert output == 5


def test_time_iterations_measures_milliseconds():
    import time

    samples, _ = time_iterations(lambda: time.sleep(0.01), 3, "cpu")
    assert all(9.0 <= s < 200.0 for s in samples)
