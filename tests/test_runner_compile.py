import os

import pytest
import torch

from runner import compile as compile_module
from runner.cells_file import CellsFile
from runner.driver import compile_cache_dirs, run_cells_file
from runner.schema import read_record, record_path
from runner_cells import COMPILE_CACHE, assert_valid, settings, tiny_cell


def test_cache_dirs_are_the_cells_scratch_folder_by_default():
    dirs = compile_cache_dirs(None, "/scratch", environ={})
    assert dirs == {"TORCHINDUCTOR_CACHE_DIR": "/scratch/inductor", "TRITON_CACHE_DIR": "/scratch/triton"}


def test_cache_dirs_set_by_the_caller_are_kept():
    environ = {"TORCHINDUCTOR_CACHE_DIR": "/host/inductor"}
    dirs = compile_cache_dirs(None, "/scratch", environ=environ)
    assert dirs == {"TORCHINDUCTOR_CACHE_DIR": "/host/inductor", "TRITON_CACHE_DIR": None}


def test_an_explicit_shared_cache_wins(tmp_path):
    dirs = compile_cache_dirs(tmp_path, "/scratch", environ={"TORCHINDUCTOR_CACHE_DIR": "/host/inductor"})
    assert dirs["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")


def test_use_cache_dirs_sets_and_clears_the_variables(monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_default")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/tmp/triton_default")
    compile_module.use_cache_dirs({"TORCHINDUCTOR_CACHE_DIR": "/cell/inductor", "TRITON_CACHE_DIR": None})
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/cell/inductor" and "TRITON_CACHE_DIR" not in os.environ


def snapshot(graphs=0, frames=0, breaks=None, skips=0):
    return {"graphs": graphs, "frames": frames, "graph_breaks": breaks or {}, "cudagraph_skips": skips}


def _stats():
    before = snapshot(graphs=1, frames=1, breaks={"old reason": 2})
    after_first = snapshot(graphs=4, frames=3, breaks={"old reason": 2, "print": 1})
    end = snapshot(graphs=5, frames=4, breaks={"old reason": 2, "print": 1}, skips=2)
    return compile_module.dynamo_stats(before, after_first, end)


def test_dynamo_stats_are_differences_between_snapshots():
    stats = _stats()
    assert stats["graphs"] == 4 and stats["graph_breaks"] == 1 and stats["break_reasons"] == ["print"]
    assert stats["recompiles"] == 1


@pytest.mark.parametrize("version, skips", [
    ("2.0.1+cu118", None), ("2.3.1", None), ("2.4.0", 2), ("2.4.0.dev20240601+cu121", 2),
    ("2.10.0", 2), ("2.13.0+cpu", 2),   # compared as strings, "2.10.0" < "2.4": skips were lost
])
def test_cudagraph_skips_are_counted_from_torch_2_4_on(monkeypatch, version, skips):
    monkeypatch.setattr(compile_module.torch, "__version__", version)
    assert _stats()["cudagraph_skips"] == skips


class Breaks(torch.nn.Module):
    def forward(self, x):
        x = x * 2
        torch._dynamo.graph_break()
        return x + 1


@pytest.mark.slow
def test_graph_breaks_are_counted_by_the_installed_torch():
    compile_module.reset()
    before = compile_module.counters_snapshot()
    model = compile_module.compile_model(Breaks(), "default", fullgraph=False)
    with torch.no_grad():
        model(torch.ones(4))
        after_first = compile_module.counters_snapshot()
        model(torch.ones(4))
    stats = compile_module.dynamo_stats(before, after_first, compile_module.counters_snapshot())
    assert stats["graph_breaks"] >= 1 and stats["graphs"] == 2 and stats["recompiles"] == 0
    assert stats["break_reasons"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_tiny_model_through_compile_mode_on_cpu(tmp_path, mode):
    cell = tiny_cell("resnet", mode=mode)
    plan = CellsFile(settings=settings(iterations=5), cells=[cell])
    assert run_cells_file(plan, tmp_path, log=lambda line: None, compile_cache_dir=COMPILE_CACHE)[0][1] == "ok"
    record = read_record(record_path(tmp_path, cell))
    assert_valid(record)
    assert record["accuracy"]["status"] == "pass"
    assert record["dynamo"]["graphs"] >= 1 and record["dynamo"]["recompiles"] == 0
    assert record["timing"]["first_call_s"] > 0 and record["timing"]["n"] == 5


def test_shared_compile_caches_are_keyed_by_the_gpu():
    from runner.driver import gpu_cache_key

    h100 = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_capability": "9.0"}
    key = gpu_cache_key(h100)
    assert key == "NVIDIA-H100-80GB-HBM3-sm90" and gpu_cache_key({"gpu_name": None}) is None
    assert gpu_cache_key({"gpu_name": "Tesla T4", "gpu_capability": "7.5"}) != key
    dirs = compile_cache_dirs("/cache/stable", "/scratch", environ={}, gpu_key=key)
    assert dirs["TRITON_CACHE_DIR"] == f"/cache/stable/triton/{key}"
    assert dirs["TORCHINDUCTOR_CACHE_DIR"] == f"/cache/stable/inductor/{key}"
    host = compile_cache_dirs(None, "/scratch", environ={"TORCHINDUCTOR_CACHE_DIR": "/host/inductor"}, gpu_key=key)
    assert host == {"TORCHINDUCTOR_CACHE_DIR": f"/host/inductor/{key}", "TRITON_CACHE_DIR": None}
    cold = compile_cache_dirs(None, "/scratch", environ={}, gpu_key=key)   # a cold cell's own folder: no key
    assert cold["TRITON_CACHE_DIR"] == "/scratch/triton"
