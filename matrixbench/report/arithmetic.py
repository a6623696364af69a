"""The report's one home for latency arithmetic: speed-ups, changes and deviations.

Conventions, used by every table, chart, comparison and the CSV output:

- A **speed-up** is a ratio: eager ms / compiled ms (2.0 means twice as fast, 1.0 no gain).
- **% faster** is derived from it: (speed-up - 1) x 100, "eager ms / compiled ms - 1".
- A **change** compares two latencies of the same cell (image against image, a mode against
  default, measured against published): candidate ms / baseline ms - 1, in %; negative is faster.
  A measured-vs-published **deviation** is the change from the published latency to ours.
- **Costs** (report.cost): images per second, dollars per million images at a price per hour, and
  the calls after which a compile pays for itself.
"""
import math

SECONDS_PER_HOUR = 3600.0
NEVER = math.inf      # a compile that never pays for itself


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


def images_per_second(batch_size, mean_ms):
    """batch size x 1000 / mean ms."""
    return batch_size * 1000.0 / mean_ms


def usd_per_million_images(usd_per_hour, mean_ms, batch_size):
    """price per hour / 3600 x seconds per image (mean ms / 1000 / batch size) x 10^6."""
    seconds_per_image = mean_ms / 1000.0 / batch_size
    return usd_per_hour / SECONDS_PER_HOUR * seconds_per_image * 1e6


def break_even_calls(first_call_s, eager_ms, compiled_ms):
    """(first call - one eager call) / (eager - compiled) per call, in calls; NEVER when compiled
    is not faster; 0 when the first call costs no more than one eager call."""
    saving_s = (eager_ms - compiled_ms) / 1000.0
    if saving_s <= 0:
        return NEVER
    return max(first_call_s - eager_ms / 1000.0, 0.0) / saving_s
