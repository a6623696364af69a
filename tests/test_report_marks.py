"""Issue 30 item 5: every mark the report prints (tables, legends, charts) is a glyph the common fonts
have, so none renders as an empty box (⧖ did, in the H100 report seen in Chromium): DejaVu Sans (matplotlib's
own, and most Linux desktops' default) and Liberation Sans (Arial's metric twin; checked where installed),
and matplotlib draws each as a chart marker without a missing-glyph warning."""
import os
import warnings
from pathlib import Path

import matplotlib
import pytest
from fontTools.ttLib import TTFont

from matrixbench.report import cost_tables, tables, verdicts

MARKS = {
    "noisy": tables.NOISY_MARK, "between noisy": tables.BETWEEN_NOISY_MARK, "accuracy": tables.ACCURACY_MARK,
    "eager failed": tables.EAGER_FAILED_MARK, "published note": tables.PUBLISHED_NOTE_MARK,
    "significant": tables.SIGNIFICANT_MARK, "per call": tables.PER_CALL_MARK, "no data": tables.NO_DATA,
    "unknown flag": tables.UNKNOWN_FLAG_MARK, "star": verdicts.STAR, "no change": verdicts.NO_CHANGE_MARK,
    "undecided": verdicts.UNDECIDED_MARK, "uncertain cost": cost_tables.UNCERTAIN_MARK, "ratio": "×",
    **{flag: mark for flag, (mark, _) in tables.FLAGS.items()},
}
FONTS = {
    "DejaVu Sans": Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf",
    "Liberation Sans": Path("/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf"),
}


@pytest.mark.parametrize("font", sorted(FONTS))
def test_every_mark_is_a_glyph_of_the_common_fonts(font):
    if not FONTS[font].is_file():
        pytest.skip(f"{font} is not installed here (Debian: fonts-liberation)")
    cmap = TTFont(os.fspath(FONTS[font])).getBestCmap()
    missing = {name: mark for name, mark in MARKS.items() for char in mark if ord(char) not in cmap}
    assert missing == {}, f"{font} lacks {missing}"


CHART_MARKS = (tables.NOISY_MARK, tables.BETWEEN_NOISY_MARK, tables.ACCURACY_MARK, tables.PER_CALL_MARK,
               verdicts.UNDECIDED_MARK, *(mark for mark, _ in tables.FLAGS.values()))   # charts._mark_flagged's


def test_matplotlib_draws_every_chart_mark_without_a_missing_glyph():
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots()
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for index, mark in enumerate(CHART_MARKS):
                axes.scatter([index], [0], marker=f"${mark}$")
            figure.canvas.draw()
        assert [str(w.message) for w in seen if "missing from" in str(w.message)] == []
    finally:
        plt.close(figure)


def test_the_marks_are_distinct():
    flags = [mark for mark, _ in tables.FLAGS.values()]
    others = [tables.PER_CALL_MARK, tables.NOISY_MARK, tables.BETWEEN_NOISY_MARK, tables.ACCURACY_MARK,
              tables.EAGER_FAILED_MARK, tables.PUBLISHED_NOTE_MARK, tables.UNKNOWN_FLAG_MARK]
    assert len(set(flags)) == len(flags) and len(set(others)) == len(others) and not set(flags) & set(others)
