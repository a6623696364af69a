"""The report's view of the torch/transformers split (report.shares): rows beside each mixed row of
the image-against-image tables, the per-mode summary of how much of the geo-mean change each factor
explains, and the comparisons.csv rows."""
import math

from matrixbench.report import arithmetic, shares, stats
from matrixbench.report import tables as t

LEGEND = (
    "Whose change is it? Where the matrix ran with `attribution`, a change between two images that differ in "
    "torch and in transformers is split through the bridge images (the torch of one side with the transformers "
    "of the other): ↳ rows under each mixed row give each factor's share, a ratio of the two cells it compares as "
    "a change, with the 95% Welch interval of the contrast of their log process means. With both bridges (2×2): "
    "torch's share with the earlier transformers, transformers' share with the earlier torch, and their "
    "interaction (what neither does alone); with one bridge, the two steps through it (the footnote says why "
    "the other is missing). The shares multiply to the row's change. \"no <factor> share\": the interval lies "
    "within the equivalence margin. The attention implementation and host syncs per call of each step's two "
    "cells are beside it: they are the usual mechanisms of a transformers share.")
SUMMARY_LEGEND = (
    "Per pair and mode, over the cells with a split: the geo-mean change and each factor's share of it (the "
    "geo-mean of its per-cell shares), in brackets the part of the change's log it explains.")


def split_rows(cells, old, new, notes):
    """The ↳ rows of one image-against-image row (none when it has no split)."""
    plan = getattr(cells, "attribution", None)
    found = shares.split(cells, plan, old, new) if plan else None
    if found is None:
        return []
    footnote = notes.ref_text(("attribution", found.path, found.note),
                              f"Split {found.path}" + (f": {found.note}" if found.note else "")) \
        if found.note else None
    if not found.shares:
        return [[t.Cell(f"↳ no split: {found.path}", kind="label", footnote=footnote), t.label(old["mode_label"]),
                 *[t.missing()] * 6]]
    rows = [_share_row(share, old, notes) for share in found.shares]
    rows[0][0].footnote = footnote
    return rows


def _share_row(share, old, notes):
    sides = [share.baseline, share.candidate]
    latencies = [t.latency(row, notes) for row in sides] if share.baseline else [t.missing(), t.missing()]
    return [t.label(f"↳ {share.label}"), t.label(old["mode_label"]), *latencies,
            t.Cell(f"{share.estimate_pct:+.1f}%"), _interval(share), t.label(share.verdict_text),
            t.label(mechanisms(share)) if share.baseline else t.missing()]


def _interval(share):
    if share.low_pct is None:
        return t.label(stats.NOT_TESTED)
    return t.Cell(f"[{share.low_pct:+.1f}%, {share.high_pct:+.1f}%]")


def mechanisms(share):
    """The attention implementation and host syncs per call of a step's two cells."""
    before, after = share.baseline, share.candidate
    found = [f"attention {before.get('attention.used')} → {after.get('attention.used')}"]
    syncs = [row.get("timing.host_syncs_per_call") for row in (before, after)]
    if syncs != [None, None]:
        found.append(f"host syncs/call {_text(syncs[0])} → {_text(syncs[1])}")
    return "; ".join(found)


def _text(value):
    return t.NO_DATA if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def summary_tables(cells):
    """Per device and mixed pair: per mode, the geo-mean change and how much of it each factor explains."""
    plan = getattr(cells, "attribution", None)
    found = []
    for device, batch, before, after in t.image_pairs(cells):
        for old, new in t.pair_cells(cells, device, batch, before, after):
            result = shares.split(cells, plan, old, new) if plan else None
            if result is not None:
                found.append(((device, before, after, old["mode_label"]), result))
    tables = {}
    for (device, before, after, mode), _ in found:
        per_mode = [(None, None, result) for key, result in found if key == (device, before, after, mode)]
        rows = tables.setdefault((device, before, after), [])
        if not any(row[1].text == mode for row in rows):
            rows.append(_summary_row(cells, before, after, mode, shares.explained(per_mode)))
    header = ["Pair", "Mode", "geo-mean change", "torch share (explains)", "transformers share (explains)",
              "interaction (explains)", "cells split"]
    return [t.drop_empty_columns(t.Table(f"{cells.image_labels[before]} → {cells.image_labels[after]} · {device}",
                                         list(header), rows))
            for (device, before, after), rows in tables.items()]


def _summary_row(cells, before, after, mode, totals):
    pair = t.label(f"{before} → {after}")
    if not totals:
        return [pair, t.label(mode), t.missing(), t.missing(), t.missing(), t.missing(), t.Cell("0")]
    total = totals["total"][0]
    return [pair, t.label(mode), t.Cell(_pct(total)),
            *(_explains(totals[factor][0], total) if factor in totals else t.missing() for factor in shares.FACTORS),
            t.Cell(str(totals["total"][1]))]


def _pct(log):
    return f"{arithmetic.percent(math.exp(log)):+.1f}%"


def _explains(log, total):
    part = f" ({log / total * 100 + 0.0:.0f}%)" if abs(total) > 1e-9 else ""
    return t.Cell(_pct(log) + part)


CSV_KINDS = {shares.TORCH: "torch_share", shares.TRANSFORMERS: "transformers_share",
             shares.INTERACTION: "interaction_share"}


def comparison_rows(cells, old, new, key):
    """comparisons.csv rows of the split of old -> new; ``key(row, kind, against)`` gives the key columns."""
    plan = getattr(cells, "attribution", None)
    found = shares.split(cells, plan, old, new) if plan else None
    if found is None:
        return []
    rows = []
    for share in found.shares:
        row = {**key(new, CSV_KINDS[share.factor], f"{share.label} [{found.path}]"),
               "estimate_ratio": math.exp(share.log), "percent": share.estimate_pct, "low_pct": share.low_pct,
               "high_pct": share.high_pct, "verdict": share.verdict_text, "margin_pct": share.margin_pct}
        if share.low_pct is not None:
            row.update(ratio_low=1.0 + share.low_pct / 100.0, ratio_high=1.0 + share.high_pct / 100.0)
        if share.baseline:
            row.update(baseline_ms=share.baseline["timing.mean_ms"], candidate_ms=share.candidate["timing.mean_ms"])
        rows.append(row)
    return rows
