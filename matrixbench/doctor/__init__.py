"""``matrixbench doctor``: what to fix on a rented GPU machine before the bill starts.

A checklist, each item ``ok``, ``warn`` (measurements would be weaker) or ``fail`` (cells would
fail or measure the wrong thing), every one not ok with its fix. Facts come from
``nvidia-smi`` (queried by ``matrixbench.gpu``, the one place that asks for the host's GPUs),
the Docker daemon and the matrix; the commands are run through one ``Commands`` seam so tests
replay recorded outputs.

One module a concept: ``check`` (a check, DoctorError, the Commands seam), ``driver`` (the driver and its
GPUs), ``docker`` (the daemon, GPUs in a container, each Docker image), ``venv`` (each venv), ``images`` (an
entry's build against this driver and these GPUs; the local backend's line), ``backend`` (which backend runs
here), ``machine`` (other GPU processes, persistence and clocks, disk, the HF cache) and ``checkup`` (the
checklist in order, its report, what ``--measure`` measures).
"""
from matrixbench.doctor.check import Check, Commands, DoctorError
from matrixbench.doctor.checkup import (
    GPUS_LEFT_OUT_MEASURE,
    NO_GPU_MEASURE,
    checklist,
    diagnose,
    measure_device,
    report,
)
from matrixbench.doctor.driver import DRIVER

__all__ = ["DRIVER", "GPUS_LEFT_OUT_MEASURE", "NO_GPU_MEASURE", "Check", "Commands", "DoctorError", "checklist",
           "diagnose", "measure_device", "report"]
