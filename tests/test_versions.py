"""matrixbench.build.versions: requirements and versions read with packaging, in one place."""
import pytest

from matrixbench.build.versions import pinned_version, release, same_release, torch_label


@pytest.mark.parametrize("requirement, pinned", [
    ("torch==2.0.1", "2.0.1"), ("torch == 2.13.0", "2.13.0"), ("torch===2.1.0", "2.1.0"),
    ("torch>=2.1,<2.2", None), ("torch==2.1.*", None), ("torch", None), ("not a requirement!", None),
])
def test_pinned_version(requirement, pinned):
    assert pinned_version(requirement) == pinned


def test_same_release_ignores_local_build_tags():
    assert same_release("2.13.0+cpu", "2.13.0") and not same_release("2.13.0", "2.1.3")


def test_release_orders_numerically():
    assert release("2.10.0") > release("2.4.1") and release("2.1.0.dev20230601+cu118") == (2, 1, 0)
    assert release("unknown") == ()
    assert torch_label("torch") == "any"
