"""The report's plain words on the host's part of its numbers (issue 32): which cells are launch-bound (their
number measures the host as much as the GPU), which processes were stall-laden, and in which cells the host
moved (its speed reference changed by more than runner.host.SPEED_MOVED within or between processes).

Reads the combined rows' ``process_host`` (report.cells: each ok process's ``timing.host`` fields, from the
record where it has them (schema v4), else the stall fields from its samples and the rest unknown)."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

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
    return f"{image}{row.get('cell.model')} bs{row.get('cell.batch_size')} {row.get('cell.mode')}"


def _marked(rows: Sequence[Mapping[str, Any]]):
    bound, laden, moved, unknown = [], [], [], 0
    for row in rows:
        processes = row.get("process_host") or []
        if not processes:
            continue
        shares = [p["launch_bound_share"] for p in processes if p["launch_bound_share"] is not None]
        if not shares:
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
        out.append(f"{unknown} cell(s) have records older than schema v4: how launch-bound they were is unknown.")
    return out
