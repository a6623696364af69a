"""runner.versions: versions compared as numbers, never as strings."""
import pytest

from runner.versions import at_least, release


@pytest.mark.parametrize("text, numbers", [
    ("2.0.1", (2, 0, 1)), ("2.10.0+cu124", (2, 10, 0)), ("2.4.0.dev20240601+cu121", (2, 4, 0)),
    ("2.1.0a0+git7bcf7da", (2, 1, 0)), ("v1.2", (1, 2)), ("2", (2,)),
])
def test_release_numbers(text, numbers):
    assert release(text) == numbers


@pytest.mark.parametrize("version, minimum, expected", [
    ("2.10.0", "2.4", True), ("2.4", "2.4.0", True), ("2.4.0+cu121", "2.4", True), ("2.3.1", "2.4", False),
    ("2.13.0", "2.4", True), ("10.0", "9.9.9", True), ("2.0.1+cu118", "2.4", False),
])
def test_at_least_compares_numbers(version, minimum, expected):
    assert at_least(version, minimum) is expected


def test_no_version_is_an_error():
    with pytest.raises(ValueError, match="not a version"):
        release("latest")
