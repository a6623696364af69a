"""Which published source each image is compared with: by torch line, or matrix.yaml's `published`."""
import pytest

from host_helpers import small_matrix_data, write_matrix
from matrixbench.build.versions import release
from matrixbench.errors import MatrixError
from matrixbench.matrix import load_matrix
from matrixbench.report.published import source_for, source_title


@pytest.mark.parametrize("version, source", [
    ("2.0.1+cu118", "main"), ("2.0.0", "main"), ("2.1.0+cu118", "nightly"), ("2.1.0.dev20230601+cu118", "nightly"),
    ("2.1.2", "nightly"), ("2.10.0", "none"), ("2.13.0+cpu", "none"), ("1.13.1", "none"), ("2.2.0", "none"),
])
def test_source_follows_the_torch_line(version, source):
    assert source_for(release(version)) == source


def test_the_matrix_override_wins():
    assert source_for(release("2.13.0"), "main") == "main"
    assert source_for(release("2.0.1"), "none") == "none"


def test_sources_name_their_tables():
    assert source_title("main") == "main tables (torch 2.0)"
    assert "nightly tables" in source_title("nightly") and "reduce-overhead tables" in source_title("nightly")


def test_matrix_accepts_published_per_image_and_keeps_it_out_of_the_build_hash(tmp_path):
    data = small_matrix_data()
    before = load_matrix(write_matrix(tmp_path, data)).images["stable"].content_hash()
    data["images"]["stable"]["published"] = "nightly"
    image = load_matrix(write_matrix(tmp_path, data)).images["stable"]
    assert image.published == "nightly" and image.content_hash() == before
    assert load_matrix(write_matrix(tmp_path, data)).to_dict()["images"]["stable"]["published"] == "nightly"


def test_matrix_refuses_an_unknown_source(tmp_path):
    data = small_matrix_data()
    data["images"]["stable"]["published"] = "latest"
    with pytest.raises(MatrixError, match="images.stable.published"):
        load_matrix(write_matrix(tmp_path, data))
