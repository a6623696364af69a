"""Issue 30 item 4: the runner keeps the seed's precision flags (TF32 off for float32 matmuls); Inductor's
warning that TF32 is available but off is silenced in the runner (exactly that one), and the report
says in one line that TF32 was off, read from the H100 run's records (tests/data/gpu/h100-2026-11-26)."""
import warnings
from pathlib import Path

import torch

from matrixbench.report.precision_notes import precision_notes
from matrixbench.report.records import load_results
from runner import precision

EVIDENCE = Path(__file__).parent / "data" / "gpu" / "h100-2026-11-26"
FUSE_ATTENTION = ("TensorFloat32 tensor cores for float32 matrix multiplication available but not enabled. "
                  "Skipping pattern matching to fused flash-attention. Consider setting "
                  "`torch.set_float32_matmul_precision('high')` for better performance.")   # run.log's other one


def inductors_warning(monkeypatch):
    """Inductor's own warning, as it fires on a TF32-capable GPU (faked: this machine has none)."""
    from torch._inductor import compile_fx

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    compile_fx._warn_tf32_disabled.__wrapped__()


def test_the_runner_silences_inductors_tf32_warning_and_no_other(monkeypatch):
    saved = precision.read_precision()
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            inductors_warning(monkeypatch)
            assert any("TensorFloat32" in str(w.message) for w in seen)   # it fires without the filter
            seen.clear()
            precision.apply_precision()
            inductors_warning(monkeypatch)
            warnings.warn(FUSE_ATTENTION, UserWarning, stacklevel=1)
            warnings.warn("TensorFloat32 something else", UserWarning, stacklevel=1)
        messages = [str(w.message) for w in seen]
        assert messages == [FUSE_ATTENTION, "TensorFloat32 something else"]
    finally:
        torch.set_float32_matmul_precision(saved["float32_matmul_precision"])


def test_the_report_says_in_one_line_that_tf32_was_off_on_the_h100():
    unreadable = []
    notes = precision_notes(load_results([EVIDENCE / "run-acc"], unreadable))
    assert unreadable == []   # the run folder's selftest.json is no record (the evidence's report listed it as one)
    assert len(notes) == 1 and notes[0].startswith("TF32 was off for float32 matmuls")
    assert "the seed's flags" in notes[0] and "cuDNN convolutions were allowed TF32" in notes[0]


def test_no_tf32_line_for_cpu_records():
    cpu = Path(__file__).parent / "fixtures" / "cpu-run"
    assert precision_notes(load_results([cpu])) == []


def test_records_with_tf32_on_are_not_called_off():
    frame = load_results([EVIDENCE / "run-acc"])
    frame.loc[frame.index[0], "precision.float32_matmul_precision"] = "high"
    notes = precision_notes(frame)
    assert len(notes) == 1 and "differed" in notes[0] and "was off" not in notes[0]
