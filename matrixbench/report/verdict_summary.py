"""The summary's verdict counts and the A/A false-alarm line, from comparisons.csv's rows."""
from matrixbench.report import stats
from matrixbench.report.tables import Cell, Table, drop_empty_columns, label

KIND_TITLES = {"speedup": "compiled against eager (speed-up)", "mode_change": "mode against default",
               "image_change": "image against image", "aa_change": "A/A: one image under two names",
               "interference": "loaded against alone"}


def verdict_table(rows, margin_pct):
    """Per device and kind of comparison, how many rows got each verdict."""
    counts = {}
    for row in rows:
        if row["kind"] in KIND_TITLES and row.get("verdict"):
            found = counts.setdefault((row["device"], row["kind"]), dict.fromkeys(stats.VERDICTS, 0))
            found[row["verdict"]] += 1
    order = list(KIND_TITLES)
    body = [[label(device), label(KIND_TITLES[kind])] + [Cell(str(found[name])) for name in stats.VERDICTS]
            for (device, kind), found in sorted(counts.items(), key=lambda item: (item[0][0], order.index(item[0][1])))]
    header = ["Device", "Comparison", *(f"no change (±{margin_pct:g}%)" if name == stats.NO_CHANGE else name
                                        for name in stats.VERDICTS)]
    return drop_empty_columns(Table("Verdicts", header, body))


def aa_line(rows):
    """"On this machine, N of M no-change (A/A) comparisons were starred (nominal 5%).", or None
    without A/A rows; M counts the tested ones."""
    found = [row["verdict"] for row in rows if row["kind"] == "aa_change"]
    if not found:
        return None
    tested = [verdict for verdict in found if verdict != stats.UNTESTED]
    starred = sum(verdict in stats.STARRED for verdict in tested)
    nominal = round((1.0 - stats.CONFIDENCE) * 100)
    untested = len(found) - len(tested)
    extra = f" ({untested} more not tested: one process per cell)" if untested else ""
    return (f"On this machine, {starred} of {len(tested)} no-change (A/A) comparisons were starred "
            f"(nominal {nominal}%){extra}.")
