"""Words of the text matrixbench writes that depend on a number."""
from typing import Optional


def count(number: int, noun: str, plural: Optional[str] = None) -> str:
    """"1 cell", "2 cells", "0 cells"; ``plural`` where adding an "s" is wrong ("processes")."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"
