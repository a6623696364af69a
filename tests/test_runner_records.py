import pytest

from runner import records
from runner.core import Cell, Status
from runner.tolerance import DEFAULT_TOLERANCES, TF32_TOLERANCE


def job(**cell_overrides):
    cell = {"model": "vit", "model_id": None, "config_path": None, "task": "image-classification",
            "weights": "random", "size": "tiny", "batch_size": 2, "mode": "default", "fullgraph": False,
            "dtype": "float16"}
    cell = Cell(**dict(cell, **cell_overrides))
    settings = {"iterations": 10, "warmup": 0, "timeout_s": 60, "device": "auto",
                "accuracy_tolerance": None, "cv_threshold": 0.1}
    return {"cell": cell, "settings": settings, "device": "cpu", "environment": {}, "precision": {},
            "started_at": records.utc_now(), "start_clock": records.clock()}


def test_record_settings_apply_warmup_floor_and_dtype_tolerance():
    settings = records.record_settings(job()["settings"], job()["cell"])
    assert settings["warmup"] == records.MIN_WARMUP
    assert settings["accuracy_tolerance"] == DEFAULT_TOLERANCES["float16"]
    assert settings["device_requested"] == "auto"


@pytest.mark.parametrize("device, precision, expected", [
    ("cpu", {"cudnn_allow_tf32": True}, DEFAULT_TOLERANCES["float32"]),      # no TF32 on a CPU
    ("cuda", {"cudnn_allow_tf32": True, "cuda_matmul_allow_tf32": False}, TF32_TOLERANCE),
    ("cuda", {"cudnn_allow_tf32": False, "cuda_matmul_allow_tf32": False}, DEFAULT_TOLERANCES["float32"]),
])
def test_float32_default_tolerance_accounts_for_tf32(device, precision, expected):
    settings = records.record_settings(job()["settings"], job(dtype="float32")["cell"], device, precision)
    assert settings["accuracy_tolerance"] == expected


def test_explicit_tolerance_wins():
    given = dict(job()["settings"], accuracy_tolerance=0.5)
    assert records.record_settings(given, job()["cell"])["accuracy_tolerance"] == 0.5


def test_new_record_names_the_cell():
    record = records.new_record(job())
    assert record.cell_id == "vit-tiny_bs2_default_float16"
    assert record.timing is None and record.error is None and record.status is Status.ERROR


class OutOfMemoryError(RuntimeError):
    pass


@pytest.mark.parametrize("exc, status", [
    (OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"), "oom"),
    (OutOfMemoryError("no words about memory"), "oom"),  # by type name alone
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"), "oom"),
    (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), "oom"),
    (RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"), "oom"),
    (ValueError("shapes do not match"), "error"),
])
def test_exceptions_map_to_statuses(exc, status):
    record = records.fail_with_exception(records.new_record(job()), exc)
    assert record.status == status
    assert record.error.message == str(exc)


def test_oom_wrapped_by_another_exception_is_oom():
    try:
        try:
            raise OutOfMemoryError("CUDA out of memory")
        except OutOfMemoryError as inner:
            raise RuntimeError("backend compiler failed") from inner
    except RuntimeError as outer:
        record = records.fail_with_exception(records.new_record(job()), outer)
    assert record.status is Status.OOM
    assert "OutOfMemoryError" in record.error.traceback
    assert record.error.type == "RuntimeError"


def test_an_oom_handled_and_suppressed_does_not_make_a_later_error_oom():
    try:
        try:
            raise OutOfMemoryError("CUDA out of memory")  # e.g. an autotune candidate, handled
        except OutOfMemoryError:
            raise ValueError("an unrelated failure") from None
    except ValueError as outer:
        record = records.fail_with_exception(records.new_record(job()), outer)
    assert record.status is Status.ERROR


def test_long_messages_are_clipped():
    record = records.fail(records.new_record(job()), Status.ERROR, "E", "x" * 10000)
    assert len(record.error.message) < 4100
