"""Host-sync counting against a fake torch.cuda that warns like torch's sync debug mode."""
import warnings

from runner.syncs import count_host_syncs


class FakeCuda:
    """torch.cuda's sync debug mode: in "warn", each synchronizing op warns (c10/cuda/CUDAFunctions.cpp)."""

    def __init__(self):
        self.mode = "default"

    def set_sync_debug_mode(self, mode):
        self.mode = mode

    def sync(self):   # e.g. .item(), a blocking .to("cuda") of a CPU tensor, nonzero()
        if self.mode == "warn":
            warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=2)


def test_counts_the_syncs_of_one_call_and_restores_the_mode():
    cuda = FakeCuda()

    def forward():
        for _ in range(45):
            cuda.sync()
        warnings.warn("an unrelated warning", UserWarning, stacklevel=2)

    assert count_host_syncs(forward, "cuda", cuda=cuda) == 45
    assert cuda.mode == "default"


def test_a_sync_free_forward_counts_zero_and_cpu_counts_nothing():
    assert count_host_syncs(lambda: None, "cuda", cuda=FakeCuda()) == 0
    assert count_host_syncs(lambda: None, "cpu") is None


def test_the_timing_regime_follows_the_host_syncs():
    from runner.syncs import timing_regime

    assert timing_regime("cuda", 0) == "pipelined_throughput"
    assert timing_regime("cuda", 45) == "per_call_latency"     # Mask2Former on transformers 4.43.4
    assert timing_regime("cuda", None) is None
    assert timing_regime("cpu", None) == "per_call_latency"
