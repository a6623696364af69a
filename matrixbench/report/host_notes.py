"""The report's plain words on the host's part of its numbers (issue 32): which cells are launch-bound (their
number measures the host as much as the GPU), which processes were stall-laden, and in which cells the host
moved (its speed reference changed by more than runner.host.SPEED_MOVED within or between processes).

Reads the combined rows' ``process_host`` (report.cells: each ok process's ``timing.host`` fields, from the
record where it has them (schema v4), else the stall fields from its samples and the rest unknown).

``noise_check_lines``: what each run folder's noise check said before its first cell (run.json's ``noise_check``,
matrixbench.run.noise_check): the change 3 processes a side resolve for launch-bound and for GPU-bound cells and
the warning, or "not measured" with why, or "skipped"; run.json is untrusted, so what cannot be read is
"unknown", never a guess."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from matrixbench.host_noise import HELPS, UNDECIDED_PCT
from matrixbench.words import count
from runner import host

JSON = Dict[str, Any]


def process_host(row: Mapping[str, Any]) -> JSON:
    """One process's host fields from its flattened record row (None where the record lacks them)."""
    def get(name: str) -> Any:
        value = row.get(f"timing.host.{name}")
        return None if isinstance(value, float) and value != value else value   # NaN: absent
    samples = row.get("timing.samples_ms") or []
    if get("stalls") is None and samples:
        stalls = host.stalls(samples)
    else:
        stalls = {"stalls": get("stalls"), "stall_share": get("stall_share"), "stall_laden": get("stall_laden")}
    return {"launch_bound_share": get("launch_bound_share"), "launch_bound": get("launch_bound"),
            "stall_laden": stalls.get("stall_laden"), "stall_share": stalls.get("stall_share"),
            "speed_before": get("speed_ref_ms.before"), "speed_after": get("speed_ref_ms.after"),
            "speed_moved": get("speed_moved"), "steal_share": get("steal_share")}


def host_moved(processes: Sequence[Mapping[str, Any]]) -> Optional[bool]:
    """The host moved within a process (its speed_moved) or between processes (their speed references before
    the loop differ by more than SPEED_MOVED); None when no process measured it."""
    before = [p["speed_before"] for p in processes if p.get("speed_before")]
    if not before and all(p.get("speed_moved") is None for p in processes):
        return None
    between = len(before) > 1 and max(before) / min(before) - 1.0 > host.SPEED_MOVED
    return bool(between or any(p.get("speed_moved") for p in processes))


def _label(row: Mapping[str, Any]) -> str:
    image = f"{row['image']}: " if row.get("image") else ""
    apart = f" [{row['settings_label']}]" if row.get("settings_label") else ""   # records.merge kept it apart
    return f"{image}{row.get('cell.model')} bs{row.get('cell.batch_size')} {row.get('cell.mode')}{apart}"


def _marked(rows: Sequence[Mapping[str, Any]]):
    bound, laden, moved, unknown = [], [], [], 0
    for row in rows:
        processes = row.get("process_host") or []
        if not processes:
            continue
        shares = [p["launch_bound_share"] for p in processes if p["launch_bound_share"] is not None]
        if row.get("device") == "cpu":
            pass   # the host does the work: launch-bound share 1 by construction (docs/method.md), no mark to give
        elif not shares:
            unknown += 1
        elif any(p["launch_bound"] for p in processes):
            bound.append(f"{_label(row)} ({max(shares):.0%})")
        count = sum(bool(p["stall_laden"]) for p in processes)
        if count:
            laden.append(f"{_label(row)} ({count} of {len(processes)})")
        if host_moved(processes):
            moved.append(_label(row))
    return bound, laden, moved, unknown


def lines(rows: Sequence[Mapping[str, Any]]) -> List[str]:
    """Notes for the report: launch-bound cells, stall-laden processes, cells whose host moved."""
    bound, laden, moved, unknown = _marked(rows)
    out = []
    if bound:
        out.append("Launch-bound (the GPU waited for the host for most of each call: the number measures the host "
                   "as much as the GPU, and moves with it): " + "; ".join(bound) + ".")
    if laden:
        out.append(f"Stall-laden processes (calls beyond {host.STALL_K:g}x the median took more than "
                   f"{host.STALL_LADEN_SHARE:.0%} of the loop: the host paused the process): " + "; ".join(laden) + ".")
    if moved:
        out.append(f"The host moved (its speed reference changed by more than {host.SPEED_MOVED:.0%} within or "
                   "between processes): " + "; ".join(moved) + ".")
    if unknown and (bound or moved):
        out.append(f"{count(unknown, 'cell')} {'has' if unknown == 1 else 'have'} records older than schema v4: how "
                   f"launch-bound {'it was' if unknown == 1 else 'they were'} is unknown.")
    return out


# --- the run's noise check (issue 32 item 3), from run.json -------------------------------------------------

STATUSES = ("measured", "not measured", "skipped")
TEXT_LIMIT = 160        # a reason or a GPU name from run.json is shown up to this many characters


@dataclass(frozen=True)
class NoiseCheck:
    """What one run.json says of its noise check, read defensively: ``status`` is one of STATUSES or "unknown"
    (``why`` then says what was unreadable); a figure that is not a finite number >= 0 is None (unknown)."""

    status: str
    why: Optional[str] = None
    processes: Optional[int] = None
    launch_pct: Optional[float] = None
    gpu_pct: Optional[float] = None
    gpu_why: Optional[str] = None
    where: Optional[str] = None

    @property
    def warns(self) -> bool:
        """Launch-bound verdicts will mostly come out undecided: the measured launch-bound figure is above
        host_noise.UNDECIDED_PCT (today's calibrated threshold, whatever the run printed)."""
        return self.status == "measured" and self.launch_pct is not None and self.launch_pct > UNDECIDED_PCT


def read_noise_check(manifest: Mapping[str, Any]) -> Optional[NoiseCheck]:
    """The noise check of a run manifest: its own ``noise_check``, else the latest earlier invocation's (a resume
    with nothing left to run checks nothing). None where no invocation has one and none ran on a GPU (a CPU
    run checks nothing); "unknown" where a GPU run has none (it predates the check) or it cannot be read."""
    invocations = [manifest] + [entry for entry in reversed(_list(manifest.get("history")))
                                if isinstance(entry, Mapping)]
    for invocation in invocations:
        if "noise_check" in invocation:
            return _parse(invocation["noise_check"])
    if any(invocation.get("gpus") is True for invocation in invocations):
        return NoiseCheck("unknown", "run.json has none: the run predates the check")
    return None


def _parse(value: Any) -> NoiseCheck:
    if not isinstance(value, Mapping) or value.get("status") not in STATUSES:
        return NoiseCheck("unknown", "run.json's noise_check is not one the report can read")
    status = str(value["status"])
    if status != "measured":
        return NoiseCheck(status, _text(value.get("why")))
    processes = value.get("processes")
    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 2:
        return NoiseCheck("unknown", "run.json's noise_check does not say how many processes its figures are for")
    device, gpu = _text(value.get("device")), _text(value.get("gpu_name"))
    where = f"{device} ({gpu})" if device and gpu else device
    return NoiseCheck(status, None, processes, _figure(value.get("launch_bound_resolvable_pct")),
                      _figure(value.get("gpu_bound_resolvable_pct")), _text(value.get("gpu_bound_why")), where)


def _list(value: Any) -> List[Any]:
    return list(value) if isinstance(value, list) else []


def _figure(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _text(value: Any) -> Optional[str]:
    if not isinstance(value, str) or not value.strip():
        return None
    text = " ".join(value.split())
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT - 3] + "..."


def _about(pct: Optional[float]) -> str:
    return "an unknown change" if pct is None else f"about {pct:.1f}%"


def check_lines(run: str, check: NoiseCheck) -> List[str]:
    """One or two notes on ``run``'s noise check: what it measured (or why not), and the warning."""
    head = f"Noise check of run {run}"
    if check.status != "measured":
        return [f"{head}: {check.status}" + (f" ({check.why})." if check.why else ".")]
    gpu = (f" and {_about(check.gpu_pct)} for GPU-bound cells (CUDA graphs, big batches)"
           if check.gpu_pct is not None or check.gpu_why is None else
           f"; GPU-bound cells: not measured ({check.gpu_why})")
    out = [f"{head}, before its first cell" + (f" on {check.where}" if check.where else "") +
           f": a comparison of {check.processes} processes a side resolves {_about(check.launch_pct)} there "
           "for launch-bound cells (eager and default at small batches)" + gpu + " (from the wander between blocks "
           "of one process: separate processes usually differ more)."]
    if check.warns:
        out.append(f"Warning from run {run}'s noise check: launch-bound verdicts will mostly come out undecided on "
                   f"that host (they resolve {check.launch_pct:.0f}%, more than {UNDECIDED_PCT:.0f}%): {HELPS}.")
    return out


def noise_check_lines(manifests: Mapping[str, Mapping[str, Any]]) -> List[str]:
    """Notes for the report: each run folder's noise check ({run folder: run.json}, records.manifests_by_folder),
    in folder order; none for a run that never checks (a CPU run)."""
    out: List[str] = []
    for folder, manifest in manifests.items():
        check = read_noise_check(manifest)
        if check is not None:
            out += check_lines(Path(folder).name, check)
    return out
