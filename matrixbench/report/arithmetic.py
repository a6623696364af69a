"""The report's one home for latency arithmetic: speed-ups, changes and deviations.

Conventions, used by every table, chart, comparison and the CSV output:

- A **speed-up** is a ratio: eager ms / compiled ms (2.0 means twice as fast, 1.0 no gain).
- **% faster** is derived from it: (speed-up - 1) x 100, "eager ms / compiled ms - 1".
- A **change** compares two latencies of the same cell (image against image, a mode against
  default, measured against published): candidate ms / baseline ms - 1, in %; negative is faster.
  A measured-vs-published **deviation** is the change from the published latency to ours.
"""


def speedup(eager_ms, compiled_ms):
    """eager ms / compiled ms: how many times faster the compiled cell runs."""
    return eager_ms / compiled_ms


def percent(ratio):
    """A ratio as a % difference from 1: (ratio - 1) x 100."""
    return (ratio - 1.0) * 100.0


def percent_faster(eager_ms, compiled_ms):
    """% faster than eager: (eager ms / compiled ms - 1) x 100."""
    return percent(speedup(eager_ms, compiled_ms))


def change_ratio(baseline_ms, candidate_ms):
    """candidate ms / baseline ms: below 1 is faster."""
    return candidate_ms / baseline_ms


def change_pct(baseline_ms, candidate_ms):
    """% change of candidate over baseline: (candidate / baseline - 1) x 100; negative is faster."""
    return percent(change_ratio(baseline_ms, candidate_ms))


def deviation_pct(published_ms, measured_ms):
    """% deviation of a measured latency from the published one: measured / published - 1."""
    return change_pct(published_ms, measured_ms)
