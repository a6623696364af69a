"""A check of the checklist (``ok``, ``warn``, ``fail`` or ``info``, with its fix), the error that carries a
failed checklist, and the one seam through which doctor runs commands and measures the disk."""
import os
import shutil
from dataclasses import dataclass, field
from typing import Callable, Optional

from matrixbench.errors import MatrixbenchError
from matrixbench.gpu import run_command


class DoctorError(MatrixbenchError):
    """At least one check failed; the message is the checklist."""

    exit_code = 7


@dataclass(frozen=True)
class Check:
    name: str
    status: str            # "ok", "warn", "fail", "info"
    detail: str
    fix: Optional[str] = None

    def lines(self):
        mark = {"ok": " ok ", "warn": "WARN", "fail": "FAIL", "info": "info"}[self.status]
        return [f"[{mark}] {self.name}: {self.detail}"] + ([f"       fix: {self.fix}"] if self.fix else [])


@dataclass
class Commands:
    """How doctor runs a command: ``run(argv) -> (exit code, stdout)`` (None when missing)."""

    run: Optional[Callable] = None
    environ: dict = field(default_factory=lambda: dict(os.environ))
    disk_free: Optional[Callable] = None

    def __post_init__(self):
        self.run = self.run or run_command
        self.disk_free = self.disk_free or (lambda path: shutil.disk_usage(path).free)
