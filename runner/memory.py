"""Peak memory of a cell: the CUDA allocator's peak on GPU, the process's max RSS on CPU."""
import resource

import torch


def reset_peak(device):
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak(device):
    if device == "cuda":
        return {"peak_bytes": int(torch.cuda.max_memory_allocated()), "kind": "cuda_max_allocated"}
    # Linux reports ru_maxrss in KiB. Includes the interpreter and libraries (~0.5 GB).
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_bytes": int(rss_kib) * 1024, "kind": "cpu_max_rss"}
