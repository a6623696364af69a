"""matrixbench/words: nouns that agree with their number in the text matrixbench writes."""
from matrixbench.words import count


def test_one_is_singular_and_every_other_number_plural():
    assert [count(n, "cell") for n in (0, 1, 2)] == ["0 cells", "1 cell", "2 cells"]
    assert count(1, "process", "processes") == "1 process" and count(3, "process", "processes") == "3 processes"
