"""run_cell in this process (no fork): the record of a real tiny model, and in-cell faults."""
import dataclasses

import pytest

from runner import records
from runner.cell import run_cell
from runner.core import Status
from runner.schema import load_record, write_record
from runner_cells import assert_valid, settings, tiny_cell


def job(cell, fault=None, **setting_overrides):
    return {"cell": cell, "settings": settings(**setting_overrides), "device": "cpu", "fault": fault,
            "environment": _environment(), "precision": {}, "started_at": records.utc_now(),
            "start_clock": records.clock()}


def _environment():
    from runner.environment import collect_environment

    return collect_environment("test-image", "sha256:0")


def test_eager_cell_record_is_complete_and_valid(tmp_path):
    record = run_cell(job(tiny_cell("resnet"), iterations=7))
    assert record.status is Status.OK, record.error
    assert_valid(record)
    timing = record.timing
    assert timing["n"] == 7 and len(timing["samples_ms"]) == 7
    assert timing["min_ms"] <= timing["median_ms"] <= timing["p90_ms"] <= timing["p99_ms"] <= timing["max_ms"]
    assert timing["timer"] == "perf_counter" and timing["load_s"] > 0 and timing["first_call_s"] > 0
    assert timing["timer_mismatch"] is False   # the loop's wall clock agrees with perf_counter
    assert timing["loop_wall_ms"] >= sum(timing["samples_ms"])
    assert timing["wall_mean_ms"] == pytest.approx(timing["mean_ms"], rel=0.1, abs=0.05)
    assert record.memory["kind"] == "cpu_max_rss" and record.memory["peak_bytes"] > 10**7
    assert record.accuracy["status"] == "skipped" and record.dynamo is None
    assert record.precision["float32_matmul_precision"] == "highest"
    assert record.environment["image_name"] == "test-image"
    assert load_record(write_record(tmp_path, record)) == record


@pytest.mark.parametrize("fault, status, error_type", [
    ("oom", "oom", "OutOfMemoryError"), ("error", "error", "InjectedError"),
])
def test_injected_exceptions_become_statuses(fault, status, error_type):
    record = run_cell(job(tiny_cell("resnet"), fault=fault))
    assert record.status == status
    assert record.error.type.endswith(error_type)
    assert "injected" in record.error.message and "Traceback" in record.error.traceback
    assert record.timing is None
    assert_valid(record)


def test_unknown_model_is_an_error_record_naming_the_fix():
    record = run_cell(job(dataclasses.replace(tiny_cell("resnet"), model="nosuch", model_id=None, size="full")))
    assert record.status is Status.ERROR
    assert "model_id" in record.error.message
    assert_valid(record)


def test_oom_in_the_eager_reference_call_says_so(monkeypatch):
    from runner import cell as cell_module

    real_build = cell_module._build

    def build_then_run_out_of_memory(cell, device, out_dir=None):
        built = real_build(cell, device, out_dir)

        def first_call_ooms(**inputs):
            raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
        built.model = first_call_ooms
        return built

    monkeypatch.setattr(cell_module, "_build", build_then_run_out_of_memory)
    record = run_cell(job(tiny_cell("resnet", mode="default")))
    assert record.status is Status.OOM
    assert record.error.type.endswith("ReferenceOutOfMemory")
    assert "eager reference call" in record.error.message
    assert "CUBLAS_STATUS_ALLOC_FAILED" in record.error.message
    assert_valid(record)


def test_warm_up_lasts_a_count_and_a_duration(monkeypatch):
    from runner import cell as cell_module
    from runner.cell import min_warmup_s, warm_up

    assert warm_up(lambda: None, 3, 0.0, "cpu")[1] == 3
    now = [0.0]   # a fake clock: each call takes exactly 10 ms, whatever the machine's load

    def step():
        now[0] += 0.01
    monkeypatch.setattr(cell_module, "clock", lambda: now[0])
    seconds, calls = warm_up(step, 3, 0.08, "cpu")
    assert seconds == pytest.approx(0.08) and calls == 8
    assert min_warmup_s("cuda") == 1.0 and min_warmup_s("cpu") == 0.0


def test_timed_loop_counts_graph_replays_reads_the_gpu_and_flags(monkeypatch):
    """The GPU branches of the timed loop, with a fake CUDAGraph class and a fake NVML monitor."""
    from runner import cell as cell_module
    from runner.cudagraphs import GraphCounter
    from test_runner_cudagraphs import FakeCUDAGraph

    readings = iter([
        {"sm_clock_mhz": 1410, "mem_clock_mhz": 1593, "temperature_c": 40, "power_w": 90.0, "throttle_reasons": []},
        {"sm_clock_mhz": 1275, "mem_clock_mhz": 1593, "temperature_c": 83, "power_w": 400.0,
         "throttle_reasons": ["sw_thermal_slowdown"]},
    ])
    monitor = type("Monitor", (), {"sample": lambda self: next(readings)})()
    asked = []
    monkeypatch.setattr(cell_module.gpu_state, "open_monitor",
                        lambda device, visible_uuid=None: asked.append(visible_uuid) or monitor)
    graph = FakeCUDAGraph()
    job = {"environment": {"gpu_uuid": "GPU-5f0e1d2c"}}
    with GraphCounter(FakeCUDAGraph) as graphs:
        graph.capture_begin()
        graph.replay()
        loop, state, counted = cell_module._timed_loop(lambda: graph.replay() or 1, 4, "cpu", job, graphs, {})
    assert asked == ["GPU-5f0e1d2c"] and state["throttled"] is True
    assert counted["violations"] is None and set(counted["energy"]) >= {"energy_j", "reason"}
    timing = cell_module._timing(loop, settings(), "cuda", "reduce-overhead", graphs, state, {"load_s": 1.0})
    assert timing["cudagraphs"] == {"warmup_captures": 1, "warmup_replays": 1, "timed_captures": 0,
                                    "timed_replays": 4, "graphs_per_call": None}
    assert timing["flags"] == ["throttled"] and timing["gpu_state"]["end"]["sm_clock_mhz"] == 1275
    capped = {"energy": {"energy_j": 10.0}, "violations": {"power_ms": 2.5, "thermal_ms": 0.0}}
    timing = cell_module._timing(loop, settings(), "cuda", "eager", None, None, {}, capped)
    assert timing["flags"] == ["throttled"] and timing["energy"] == {"energy_j": 10.0}
    assert timing["violations"]["power_ms"] == 2.5
    skipped = GraphCounter(FakeCUDAGraph)   # torch 2.0's silent fallback: no graph ever replayed
    timing = cell_module._timing(loop, settings(), "cuda", "reduce-overhead", skipped, None, {})
    assert timing["flags"] == ["no_cudagraphs"] and timing["gpu_state"] is None


def test_cpu_cells_record_null_gpu_fields(tmp_path):
    record = run_cell(job(tiny_cell("resnet"), iterations=3))
    timing = record.timing
    assert timing["cudagraphs"] is None and timing["gpu_state"] is None and timing["host_syncs_per_call"] is None
    assert timing["flags"] == [] and timing["warmup_calls"] == 3
    assert timing["regime"] == "per_call_latency"   # a CPU call returns when it is done
    start, end = timing["windows"]["timed"]
    assert timing["windows"]["compile"] is None and record.started_at and 0 < end - start < record.duration_s
    assert timing["energy"]["source"] in ("rapl", None) and timing["violations"] is None
    assert (timing["energy"]["energy_j"] is None) == (timing["energy"]["reason"] is not None)
    assert_valid(record)
