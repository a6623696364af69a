"""Host syncs per call: how often one forward makes the CPU wait for the GPU.

transformers versions differ here (4.43.4's Mask2Former syncs 45 times per forward, 5.23's
none; OwlViT copies a CPU tensor to the GPU on every call), and a sync stalls the launch
queue, so it changes what a latency means. Counted once per cell, on one untimed call, with
``torch.cuda.set_sync_debug_mode("warn")``: torch warns at each synchronizing CUDA call
("called a synchronizing CUDA operation"). Not observable on CPU: None there.
"""
import warnings

from runner.core import PER_CALL, PIPELINED

SYNC_WARNING = "synchronizing CUDA operation"


def timing_regime(device, host_syncs_per_call):
    """The record's ``timing.regime`` from the host syncs counted in one call; None when uncounted.

    With per-call events and one sync after the loop, a GPU model that never waits for the GPU
    queues its calls back to back: the mean is pipelined throughput. One that syncs inside a call
    drains the queue each call: the mean is that call's latency. On the CPU every call finishes
    before it returns: latency."""
    if device != "cuda":
        return PER_CALL
    if host_syncs_per_call is None:
        return None
    return PER_CALL if host_syncs_per_call > 0 else PIPELINED


def count_host_syncs(step, device, cuda=None):
    """Synchronizing CUDA operations during one ``step()``; None on CPU."""
    if device != "cuda":
        return None
    if cuda is None:
        import torch

        cuda = torch.cuda
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            cuda.set_sync_debug_mode("default")
    return sum(SYNC_WARNING in str(warning.message) for warning in caught)
