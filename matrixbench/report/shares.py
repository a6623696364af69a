"""Whose change is it? A change between two images that differ in torch and in transformers, split
into torch's share and transformers' share through the bridge images `run --attribution` measured
(matrixbench.matrix.attribution: the torch of one side with the transformers of the other).

Per cell, with A the earlier image, B the later, C the later torch with the earlier transformers and
D the earlier torch with the later transformers, on the log of the mean latency:

- both corners ran (the 2x2): torch share log C/A, transformers share log D/A, interaction
  log (B·A)/(C·D); the three add up to log B/A;
- one corner ran (or could exist): the two sequential steps through it (via C: torch log C/A, then
  transformers log B/C; via D: transformers log D/A, then torch log B/D), and the split says which
  path it took and why the other corner is missing (its reason: transformers' metadata, or the
  corner's failed cell).

Each share is a linear contrast of the cells' mean log process means (``stats.contrast``: Welch's
interval, Welch-Satterthwaite df), with the same verdicts as every comparison: "no <factor> share"
when its interval lies inside the equivalence margin.
"""
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from matrixbench.build.versions import public
from matrixbench.report import arithmetic, stats
from matrixbench.report.cells import is_ok
from matrixbench.report.verdicts import throttled

TORCH, TRANSFORMERS, INTERACTION = "torch", "transformers", "interaction"
FACTORS = (TORCH, TRANSFORMERS, INTERACTION)
BOTH = "2×2"


@dataclass(frozen=True)
class Plan:
    """What the runs' manifests say of attribution: bridges and refused corners, by (torch of, transformers of)."""

    bridges: Dict[Tuple[str, str], str] = field(default_factory=dict)
    refused: Dict[Tuple[str, str], Tuple[str, str]] = field(default_factory=dict)   # -> (name, reason)

    @property
    def bridge_names(self):
        return set(self.bridges.values())


def plan_of(manifests) -> Optional[Plan]:
    """The attribution plan of every run manifest (run.json's matrix: ``bridges``, ``refused``); None
    when no run derived bridges."""
    plan = Plan()
    for manifest in manifests:
        matrix = manifest.get("matrix") or {}
        for bridge in matrix.get("bridges") or ():
            plan.bridges[(bridge["torch_of"], bridge["transformers_of"])] = bridge["name"]
        for corner in matrix.get("refused") or ():
            plan.refused[(corner["torch_of"], corner["transformers_of"])] = (corner["name"], corner["reason"])
    return plan if plan.bridges or plan.refused else None


@dataclass(frozen=True)
class Share:
    """One factor's share of a change: a ratio (as % change) with its interval and verdict."""

    factor: str
    label: str                       # "torch 2.0.1 → 2.13.0 (transformers 4.43.4)"
    estimate_pct: float
    low_pct: Optional[float]
    high_pct: Optional[float]
    verdict: str
    log: float                       # the share on the log scale (shares add up to log B/A)
    margin_pct: float                # the equivalence margin of "no share"
    baseline: Optional[dict] = None  # the two cells the share compares (None for the interaction)
    candidate: Optional[dict] = None

    @property
    def verdict_text(self):
        if self.verdict == stats.NO_CHANGE:
            return f"no {self.factor} share (±{self.margin_pct:g}%)"
        return self.verdict


@dataclass(frozen=True)
class Split:
    path: str                        # BOTH, or "via <corner>" (the two sequential steps)
    shares: Tuple[Share, ...]
    note: str = ""                   # why a corner is missing
    total_log: float = 0.0

    def share(self, factor):
        return next((share for share in self.shares if share.factor == factor), None)


def is_mixed(old, new):
    """Whether two rows of a pair differ in torch and in transformers (what a split is for)."""
    return all(old[key] and new[key] and old[key] != new[key]
               for key in ("environment.torch", "environment.transformers"))


def split(cells, plan, old, new) -> Optional[Split]:
    """The split of the change old -> new (rows of one cell in two images), or None without bridges;
    verdicts at the report's equivalence margin (``cells.margin_pct``)."""
    margin_pct = cells.margin_pct
    if not (is_mixed(old, new) and is_ok(old) and is_ok(new)):
        return None
    a, b = old["image"], new["image"]
    corners = {key: _corner(cells, plan, old, *key) for key in ((b, a), (a, b))}
    usable = {key: found for key, found in corners.items() if isinstance(found, dict)}
    notes = "; ".join(found for found in corners.values() if isinstance(found, str))
    if not any(key in plan.bridges or key in plan.refused for key in corners):
        return None
    c, d = usable.get((b, a)), usable.get((a, b))
    total = _log_ratio(old, new)
    if c is not None and d is not None:
        return Split(BOTH, (_share(TORCH, old, c, margin_pct), _share(TRANSFORMERS, old, d, margin_pct),
                            _interaction(old, new, c, d, margin_pct)), notes, total)
    if c is not None:   # torch first, then transformers
        return Split(f"via {c['image']}", (_share(TORCH, old, c, margin_pct),
                                           _share(TRANSFORMERS, c, new, margin_pct)), notes, total)
    if d is not None:   # transformers first, then torch
        return Split(f"via {d['image']}", (_share(TRANSFORMERS, old, d, margin_pct),
                                           _share(TORCH, d, new, margin_pct)), notes, total)
    return Split("no corner ran", (), notes, total)


def _corner(cells, plan, row, torch_of, transformers_of):
    """The corner's row when it ran; else why not (a string)."""
    if (torch_of, transformers_of) in plan.refused:
        name, reason = plan.refused[(torch_of, transformers_of)]
        return f"{name} cannot exist: {reason}"
    name = plan.bridges.get((torch_of, transformers_of))
    if name is None:
        return f"no bridge with the torch of {torch_of} and the transformers of {transformers_of}"
    found = cells.get(row["device_name"], name, row["cell.batch_size"], row["row_key"], row["mode_label"])
    if found is None:
        return f"{name}: no record of this cell"
    if not is_ok(found):
        return f"{name}: {found['status']} ({found.get('error.type') or ''}: {found.get('error.message') or ''})"
    return found


def _log_ratio(old, new):
    return _mean_log(new) - _mean_log(old)


def _mean_log(row):
    return float(np.mean(np.log(row["process_means"])))


def _label(factor, baseline, candidate):
    other = TRANSFORMERS if factor == TORCH else TORCH
    return (f"{factor} {public(baseline[f'environment.{factor}'])} → {public(candidate[f'environment.{factor}'])} "
            f"({other} {public(baseline[f'environment.{other}'])})")


def _share(factor, baseline, candidate, margin_pct):
    found = _contrast([baseline, candidate], [-1.0, 1.0], margin_pct)
    return Share(factor, _label(factor, baseline, candidate), *found, margin_pct, baseline=baseline,
                 candidate=candidate)


def _interaction(a, b, c, d, margin_pct):
    found = _contrast([a, b, c, d], [1.0, 1.0, -1.0, -1.0], margin_pct)
    return Share(INTERACTION, "interaction (what neither change does alone)", *found, margin_pct)


def _contrast(rows, weights, margin_pct):
    """(estimate %, low %, high %, verdict, log estimate) of a contrast of the rows' process means."""
    groups = [row["process_means"] for row in rows]
    if min(len(group) for group in groups) < stats.MIN_PROCESSES:
        estimate = sum(weight * _mean_log(row) for weight, row in zip(weights, rows))
        return arithmetic.percent(math.exp(estimate)), None, None, stats.UNTESTED, estimate
    estimate, low, high, _ = stats.contrast(groups, weights)
    verdict = stats.verdict(math.exp(low), math.exp(high), margin_pct)
    if verdict in stats.DECIDED and throttled(*rows):   # as verdicts.judge_cells: a throttled side decides nothing
        verdict = stats.UNDECIDED
    return (arithmetic.percent(math.exp(estimate)), arithmetic.percent(math.exp(low)),
            arithmetic.percent(math.exp(high)), verdict, estimate)


def splits(cells, plan, pairs) -> List[Tuple[dict, dict, Split]]:
    """(old, new, split) of every mixed row of the given (old, new) rows that has one."""
    found = []
    for old, new in pairs:
        result = split(cells, plan, old, new)
        if result is not None:
            found.append((old, new, result))
    return found


def explained(found) -> Dict[str, Tuple[float, int]]:
    """Of the geo-mean change over the splits given: {factor: (its share of the mean log change as a
    ratio, cells)}, and "total"; each factor's share is the mean of its per-cell log shares."""
    complete = [result for _, _, result in found if result.shares]
    if not complete:
        return {}
    totals = {"total": float(np.mean([result.total_log for result in complete]))}
    for factor in FACTORS:
        if any(result.share(factor) for result in complete):   # no interaction on the sequential path
            totals[factor] = float(np.mean([result.share(factor).log if result.share(factor) else 0.0
                                            for result in complete]))
    return {name: (value, len(complete)) for name, value in totals.items()}
