"""run_cell in this process (no fork): the record of a real tiny model, and in-cell faults."""
import pytest

from runner import records
from runner.cell import run_cell
from runner.schema import read_record, write_record
from runner_cells import assert_valid, settings, tiny_cell


def job(cell, **setting_overrides):
    return {"cell": cell, "settings": settings(**setting_overrides), "device": "cpu",
            "environment": _environment(), "precision": {}, "started_at": records.utc_now(),
            "start_clock": records.clock()}


def _environment():
    from runner.environment import collect_environment

    return collect_environment("test-image", "sha256:0")


def test_eager_cell_record_is_complete_and_valid(tmp_path):
    record = run_cell(job(tiny_cell("resnet"), iterations=7))
    assert record["status"] == "ok", record["error"]
    assert_valid(record)
    timing = record["timing"]
    assert timing["n"] == 7 and len(timing["samples_ms"]) == 7
    assert timing["min_ms"] <= timing["median_ms"] <= timing["p90_ms"] <= timing["p99_ms"] <= timing["max_ms"]
    assert timing["timer"] == "perf_counter" and timing["load_s"] > 0 and timing["compile_s"] > 0
    assert timing["timer_mismatch"] is False   # the loop's wall clock agrees with perf_counter
    assert timing["loop_wall_ms"] >= sum(timing["samples_ms"])
    assert timing["wall_mean_ms"] == pytest.approx(timing["mean_ms"], rel=0.1, abs=0.05)
    assert record["memory"]["kind"] == "cpu_max_rss" and record["memory"]["peak_bytes"] > 10**7
    assert record["accuracy"]["status"] == "skipped" and record["dynamo"] is None
    assert record["precision"]["float32_matmul_precision"] == "highest"
    assert record["environment"]["image_name"] == "test-image"
    assert read_record(write_record(tmp_path, record)) == record


@pytest.mark.parametrize("fault, status, error_type", [
    ("oom", "oom", "OutOfMemoryError"), ("error", "error", "InjectedError"),
])
def test_injected_exceptions_become_statuses(fault, status, error_type):
    record = run_cell(job(tiny_cell("resnet", fault=fault)))
    assert record["status"] == status
    assert record["error"]["type"].endswith(error_type)
    assert "injected" in record["error"]["message"] and "Traceback" in record["error"]["traceback"]
    assert record["timing"] is None
    assert_valid(record)


def test_unknown_model_is_an_error_record_naming_the_fix():
    record = run_cell(job(dict(tiny_cell("resnet"), model="nosuch", model_id=None, size="full")))
    assert record["status"] == "error"
    assert "model_id" in record["error"]["message"]
    assert_valid(record)


def test_oom_in_the_eager_reference_call_says_so(monkeypatch):
    from runner import cell as cell_module

    real_build = cell_module._build

    def build_then_run_out_of_memory(cell, device):
        built = real_build(cell, device)

        def first_call_ooms(**inputs):
            raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
        built.model = first_call_ooms
        return built

    monkeypatch.setattr(cell_module, "_build", build_then_run_out_of_memory)
    record = run_cell(job(tiny_cell("resnet", mode="default")))
    assert record["status"] == "oom"
    assert record["error"]["type"].endswith("ReferenceOutOfMemory")
    assert "eager reference call" in record["error"]["message"]
    assert "CUBLAS_STATUS_ALLOC_FAILED" in record["error"]["message"]
    assert_valid(record)
