"""The summary's verdict counts, the A/A false-alarm line and the multiplicity line, from comparisons.csv's rows."""
from collections import Counter

from matrixbench.report import stats
from matrixbench.report.tables import Cell, Table, drop_empty_columns, label
from matrixbench.words import count

KIND_TITLES = {"speedup": "compiled against eager (speed-up)",
               "paired_speedup": "compiled against eager, paired in one process",
               "mode_change": "mode against default",
               "image_change": "image against image", "aa_change": "A/A: one image under two names",
               "interference": "loaded against alone"}

# Left out of the multiplicity count: A/A rows (their own line) and paired speed-ups (a second view of a
# speed-up already counted, not another hypothesis).
NOT_HYPOTHESES = ("aa_change", "paired_speedup")


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
    """"On this machine, N of M no-change (A/A) comparisons were starred (a simulator of known truth
    stars X% at B vs C processes; nominal 5%).", or None without A/A rows; M counts the tested ones,
    B vs C the process counts most of them had, and how they were judged (paired by round, in turns, or not:
    stats.simulated_false_star_rate measures X at that design)."""
    found = [row for row in rows if row["kind"] == "aa_change"]
    if not found:
        return None
    tested = [row for row in found if row["verdict"] != stats.UNTESTED]
    starred = sum(row["verdict"] in stats.STARRED for row in tested)
    nominal = round((1.0 - stats.CONFIDENCE) * 100)
    untested = len(found) - len(tested)
    extra = f" ({untested} more not tested: one process per cell)" if untested else ""
    measured = f"nominal {nominal}%"
    counts = Counter((row.get("baseline_processes"), row.get("candidate_processes"), row.get("pairing"))
                     for row in tested)
    if counts:
        (baseline, candidate, pairing), _ = counts.most_common(1)[0]
        if isinstance(baseline, int) and isinstance(candidate, int) and min(baseline, candidate) >= stats.MIN_PROCESSES:
            # in turns: Student's t on the rounds' log ratios, the statistics of pairing by round
            paired = pairing in (stats.PAIRED_BY_ROUND, stats.IN_TURNS)
            rate = stats.simulated_false_star_rate(baseline, candidate, paired=paired)
            design = f" {pairing}" if paired else ""
            measured = (f"a simulator of known truth stars {rate:.1%} of them at {baseline} vs {candidate} "
                        f"processes{design}; nominal {nominal}%")
    return (f"On this machine, {starred} of {count(len(tested), 'no-change (A/A) comparison')} "
            f"{'was' if starred == 1 else 'were'} starred ({measured}){extra}.")


def multiplicity_line(rows):
    """How many of the report's stars chance alone would give, and the Benjamini-Hochberg view: "N of
    M tested comparisons are starred; if nothing had changed, chance alone would star about E (at
    least one in P% of such reports). At a 5% false-discovery rate (Benjamini-Hochberg) D of them
    stand.", or None without tested rows. A/A rows are left out (their line is aa_line's)."""
    tested = [row for row in rows if row.get("kind") in KIND_TITLES and row["kind"] not in NOT_HYPOTHESES
              and row.get("verdict") and row["verdict"] != stats.UNTESTED]
    if not tested:
        return None
    starred = sum(row["verdict"] in stats.STARRED for row in tested)
    expected, any_star = stats.chance_stars(len(tested))
    line = (f"{starred} of {count(len(tested), 'tested comparison')} {'is' if starred == 1 else 'are'} starred; if "
            "nothing had changed, chance alone "
            f"would star about {expected:.1f} of them (at least one in {any_star:.0%} of such reports).")
    p_values = [row.get("p_value") for row in tested]
    if all(isinstance(value, float) for value in p_values):
        found = stats.benjamini_hochberg(p_values)
        kept = sum(keep and row["verdict"] in stats.STARRED for keep, row in zip(found, tested))
        q = round((1.0 - stats.CONFIDENCE) * 100)
        line += (f" At a {q}% false-discovery rate (Benjamini-Hochberg over these {len(tested)}), {kept} of the "
                 f"{count(starred, 'star')} {'stands' if kept == 1 else 'stand'}.")
    return line
