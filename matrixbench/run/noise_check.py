"""A GPU run's host-noise check before its first cell (issue 32 item 3): the runner's noise probe
(runner.noise_probe) started in the first pending image's environment exactly as a run starts a runner
(``python -m runner --cells ... --noise-probe S``: docker, venv or local alike), judged by
matrixbench.host_noise.read_probe, kept in ``results/<run>/noise_check.json`` and summarized for run.json.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

from matrixbench.environments.base import Paths, RunRequest, Starter
from matrixbench.executors.scheduler import RUNNER_START_S
from matrixbench.host_noise import PROBE_S, ProbeNoise, read_probe
from matrixbench.run.launch import Outcome, launch
from matrixbench.run.layout import NOISE_CHECK_DIRNAME, NOISE_CHECK_FILENAME
from runner.noise_probe import PROBE_FILENAME
from runner.schema import write_json_atomic

# A run's noise check beside PROBE_S: its runner's start (torch, the model's build), where this run's records show
# no runner start yet (Estimates.runner_start_s, measured here, replaces it): a full-size GPU run's generic start
# (scheduler.RUNNER_START_S, from the committed H100 and H200 records; the check runs on GPU runs only).
PROBE_START_S = RUNNER_START_S["full"]
NOISE_CHECK_S = PROBE_S + PROBE_START_S   # --no-noise-check's help: about what a check costs


@dataclass(frozen=True)
class CheckPlan:
    """Whether a run checks this host's noise before its bill (``planned``): "measure", "skipped" (--no-noise-check),
    "not measured" (--executor ray: the cells run on the nodes) or "none" (a CPU run, or nothing to run); ``why``
    says why not. What the real run does (run.command) and what its dry run says (``dry_run_line``), one rule."""

    planned: str
    why: str = ""

    def seconds(self, runner_start_s: Optional[float] = None) -> float:
        """What the check adds before the bill where it measures (else nothing): PROBE_S and a runner's start,
        ``runner_start_s`` as this run's records show it (Estimates.runner_start_s), else PROBE_START_S."""
        if self.planned != MEASURE:
            return 0.0
        return PROBE_S + (PROBE_START_S if runner_start_s is None else runner_start_s)

    def dry_run_line(self, runner_start_s: Optional[float] = None) -> str:
        """The dry run's line (it starts nothing, so measures nothing): what a real run would do first."""
        if self.planned == MEASURE:
            start = (f"a runner's start as measured here, {runner_start_s:.0f} s" if runner_start_s is not None
                     else f"a runner's start, taken as {PROBE_START_S:.0f} s: no record here shows one yet")
            return (f"noise check: a real run first spends about {self.seconds(runner_start_s):.0f} s measuring "
                    f"this host's noise with a small launch-bound model ({PROBE_S:.0f} s and {start}), before the "
                    "bill and the first cell (in the estimate below; --no-noise-check skips it)")
        return f"noise check: none ({self.why})"


MEASURE, SKIPPED, NOT_MEASURED, NONE = "measure", "skipped", "not measured", "none"
RAY_WHY = "--executor ray: the cells run on the cluster's nodes, not here"   # why a Ray run measures no noise here


def plan_check(gpus: bool, pending: Sequence[object], enabled: bool, executor: Optional[str]) -> CheckPlan:
    """Whether a run on a GPU (``gpus``) with ``pending`` work checks the host's noise first: only a GPU run with
    something to run, not --no-noise-check (``enabled`` False), not --executor ray."""
    if not gpus:
        return CheckPlan(NONE, "a CPU run checks nothing; --device cpu, or no GPU here")
    if not pending:
        return CheckPlan(NONE, "nothing to run")
    if not enabled:
        return CheckPlan(SKIPPED, "--no-noise-check")
    if executor == "ray":
        return CheckPlan(NOT_MEASURED, RAY_WHY)
    return CheckPlan(MEASURE)


def run_check(environment: Starter, request: RunRequest, run_path: Path, emit: Callable[[str], None],
              seconds: float = PROBE_S,
              launcher: Optional[Callable[[Starter, RunRequest], Outcome]] = None) -> Dict[str, object]:
    """The start of a GPU run: the probe in ``request``'s image environment (a runner started as the run starts
    one, ``--noise-probe``), on the run's device; its lines emitted, its result and judgement written to
    ``<run>/noise_check.json``; returns what run.json keeps (``status``: measured, or not measured with why).
    Never raises: a check that cannot run is a status line, not a failure."""

    folder = Path(run_path) / NOISE_CHECK_DIRNAME
    probe_request = dataclasses.replace(
        request, work=dataclasses.replace(request.work, cells=request.work.cells[:1], schedule=(), probe_s=seconds),
        paths=Paths(folder, hf_cache_dir=request.paths.hf_cache_dir))
    began = time.monotonic()
    try:
        outcome = (launcher or launch)(environment, probe_request)
        answer = folder / PROBE_FILENAME
        if not outcome.complete or not answer.is_file():
            tail = (str(getattr(outcome, "log_tail", "") or "").strip().splitlines() or
                    [f"exit code {outcome.exit_code}"])[-1]
            raise RuntimeError(f"the probe's runner failed: {tail}")
        result = json.loads(answer.read_text())
        noise = read_probe(result)
    except KeyboardInterrupt:
        raise
    except Exception as exc:   # never a failure of the run: a status line
        emit(f"noise check: not measured ({exc}); the run goes on (--no-noise-check skips it)")
        return {"status": "not measured", "why": str(exc), "image": request.image.name,
                "seconds": round(time.monotonic() - began, 1)}
    for line in noise.lines():
        emit(line)
    kept: Dict[str, object] = {"status": "measured", "image": request.image.name, "file": NOISE_CHECK_FILENAME,
            "seconds": round(time.monotonic() - began, 1), **_brief(noise)}
    try:
        write_json_atomic(Path(run_path) / NOISE_CHECK_FILENAME, {**kept, "judged": noise.to_dict(), "probe": result})
    except OSError as exc:
        emit(f"noise check: cannot write {NOISE_CHECK_FILENAME}: {exc}")
        kept["file"] = None
    return kept


def _brief(noise: ProbeNoise) -> Dict[str, object]:
    """What run.json keeps of a measured check (the report cites it; the calls are in noise_check.json)."""
    return {"device": noise.device, "gpu_name": noise.gpu_name, "processes": noise.processes,
            "launch_bound_resolvable_pct": noise.launch_resolvable_pct,
            "gpu_bound_resolvable_pct": noise.gpu_resolvable_pct, "gpu_bound_why": noise.gpu_why,
            "launch_block_cv": noise.launch.get("block_cv"), "launch_jitter_cv": noise.launch.get("jitter_cv"),
            "launch_stall_share": noise.launch.get("stall_share"),
            "launch_bound_share": noise.launch.get("launch_bound_share"),
            "gpu_block_cv": noise.gpu.get("block_cv") if noise.gpu else None,
            "steal_share": noise.steal_share, "warns": noise.warns, "lines": noise.lines()}
