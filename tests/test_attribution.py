"""Attribution's bridge images (matrixbench.matrix.attribution): derived from a mixed pair, refused with the
reason transformers' real wheel metadata gives (tests/data/transformers-metadata: the header of each
wheel's METADATA as PyPI serves it), hashed and described like any image, priced by `run --dry-run`."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from host_helpers import write_matrix
from matrixbench.matrix import attribution, load_matrix

REPO = Path(__file__).resolve().parents[1]
METADATA = REPO / "tests" / "data" / "transformers-metadata"
STABLE = {"torch": "torch==2.0.1", "python": "3.10", "transformers": "transformers==4.43.4",
          "extra_pins": ["numpy<2"], "index_url": "https://download.pytorch.org/whl/cpu"}
LATEST = {"torch": "torch==2.13.0", "python": "3.12", "transformers": "transformers==5.23.0",
          "env": {"OMP_NUM_THREADS": "1"}}


def real_metadata(spec):
    """transformers' own METADATA headers for the versions the tests use; None for others."""
    path = METADATA / f"transformers-{spec.split('==')[1]}.METADATA"
    return path.read_text() if path.is_file() else None


def matrix_data(**images):
    return {"images": images, "models": {"vit": {"id": "google/vit-base-patch16-224",
                                                  "task": "image-classification"}},
            "batch_sizes": [1, 4], "modes": ["eager", "default"], "attribution": True, "repeats": 3}


def load(tmp_path, data, **kwargs):
    return load_matrix(write_matrix(tmp_path, data), metadata=real_metadata, **kwargs)


def test_a_mixed_pair_gets_the_corner_that_can_exist_and_the_other_is_refused_with_transformers_reason(tmp_path):
    matrix = load(tmp_path, matrix_data(stable=STABLE, latest=LATEST))
    assert list(matrix.images) == ["stable", "latest", "latest-torch.stable-transformers"]
    bridge = matrix.images["latest-torch.stable-transformers"]
    # torch, its Python, index and pins from latest; transformers from stable
    assert (bridge.torch, bridge.python, bridge.transformers) == ("torch==2.13.0", "3.12", "transformers==4.43.4")
    assert bridge.index_url is None and bridge.extra_pins == () and bridge.base_image == "python:3.12-slim-bookworm"
    assert bridge.env == {"OMP_NUM_THREADS": "1"} and bridge.published == "none"
    assert matrix.bridges == (attribution.Bridge("latest-torch.stable-transformers", "latest", "stable"),)
    (refused,) = matrix.refused
    assert (refused.name, refused.torch_of, refused.transformers_of) == (
        "stable-torch.latest-transformers", "stable", "latest")
    assert "transformers 5.23.0" in refused.reason
    assert "requires Python >=3.11.0, and the torch side's Python is 3.10" in refused.reason
    assert "requires torch>=2.6" in refused.reason and "torch==2.0.1" in refused.reason


def test_the_other_corner_exists_when_transformers_allows_it_and_numpy_pins_go_with_torch(tmp_path):
    seed = {**STABLE, "transformers": "transformers==4.30.2"}
    newer = {"torch": "torch==2.1.0", "python": "3.10", "transformers": "transformers==4.43.4",
             "extra_pins": ["numpy<2"]}
    matrix = load(tmp_path, matrix_data(seed=seed, newer=newer))
    assert [b.name for b in matrix.bridges] == ["newer-torch.seed-transformers", "seed-torch.newer-transformers"]
    assert matrix.refused == ()
    corner = matrix.images["seed-torch.newer-transformers"]
    assert (corner.torch, corner.transformers, corner.extra_pins) == ("torch==2.0.1", "transformers==4.43.4",
                                                                      ("numpy<2",))
    assert corner.content_hash() not in {image.content_hash() for name, image in matrix.images.items()
                                         if name != corner.name}


def test_pairs_that_change_one_of_the_two_need_no_bridge_and_without_the_key_nothing_is_derived(tmp_path):
    same_transformers = {**LATEST, "transformers": STABLE["transformers"]}
    matrix = load(tmp_path, matrix_data(stable=STABLE, latest=same_transformers))
    assert list(matrix.images) == ["stable", "latest"] and matrix.bridges == matrix.refused == ()
    data = matrix_data(stable=STABLE, latest=LATEST)
    del data["attribution"]
    plain = load(tmp_path, data)
    assert list(plain.images) == ["stable", "latest"]
    assert "attribution" not in plain.to_dict()   # a matrix without it hashes as before the key existed


def test_the_run_manifest_keeps_the_bridges_and_the_refused_corners_reasons(tmp_path):
    data = load(tmp_path, matrix_data(stable=STABLE, latest=LATEST)).to_dict()
    assert data["attribution"] is True
    assert list(data["bridges"]) == [{"name": "latest-torch.stable-transformers", "torch_of": "latest",
                                "transformers_of": "stable"}]
    assert data["refused"][0]["name"] == "stable-torch.latest-transformers"
    assert "torch>=2.6" in data["refused"][0]["reason"]


def test_without_metadata_the_corner_is_built_and_pip_or_the_model_decides(tmp_path):
    matrix = load_matrix(write_matrix(tmp_path, matrix_data(stable=STABLE, latest=LATEST)),
                         metadata=lambda spec: None)
    assert [b.name for b in matrix.bridges] == ["latest-torch.stable-transformers",
                                                "stable-torch.latest-transformers"]


def test_wheel_metadata_reads_the_wheel_in_the_wheelhouse(tmp_path):
    import zipfile
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    with zipfile.ZipFile(wheelhouse / "transformers-5.23.0-py3-none-any.whl", "w") as archive:
        archive.writestr("transformers-5.23.0.dist-info/METADATA", real_metadata("transformers==5.23.0"))
    text = attribution.wheel_metadata("transformers==5.23.0", environ={"MATRIXBENCH_WHEELHOUSE": str(wheelhouse)})
    assert "Requires-Python: >=3.11.0" in text
    assert attribution.wheel_metadata("transformers>=4", environ={}) is None   # no exact pin, no wheel


def test_run_dry_run_prints_the_cost_of_attribution(tmp_path):
    path = write_matrix(tmp_path, matrix_data(stable=STABLE, latest=LATEST))
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    import zipfile
    for version in ("4.43.4", "5.23.0"):
        with zipfile.ZipFile(wheelhouse / f"transformers-{version}-py3-none-any.whl", "w") as archive:
            archive.writestr(f"transformers-{version}.dist-info/METADATA",
                             real_metadata(f"transformers=={version}"))
    done = subprocess.run([sys.executable, "-m", "matrixbench.cli", "run", "--matrix", str(path), "--results",
                           str(tmp_path / "results"), "--backend", "venv", "--device", "cpu", "--dry-run"],
                          env={**os.environ, "MATRIXBENCH_WHEELHOUSE": str(wheelhouse)}, cwd=REPO,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("attribution: 1 bridge image(s) to build beside the matrix's 2, 4 extra cell(s) "
                        "(4 per image, 3 processes each)")
    assert lines[1] == "  bridge latest-torch.stable-transformers: torch of latest, transformers of stable"
    assert lines[2].startswith("  cannot exist stable-torch.latest-transformers: transformers 5.23.0: it requires")
    assert any(line.startswith("latest-torch.stable-transformers") for line in lines[3:])


@pytest.mark.parametrize("flag", [True, False])
def test_the_attribution_flag_overrides_the_file(tmp_path, flag):
    from matrixbench.matrix import Overrides
    data = matrix_data(stable=STABLE, latest=LATEST)
    data["attribution"] = not flag
    if not flag:
        del data["attribution"]
    matrix = load(tmp_path, data, overrides=Overrides(attribution=True))
    assert matrix.attribution and len(matrix.bridges) == 1


def test_the_cost_line_with_repeats_auto_says_so(tmp_path):
    data = {**matrix_data(stable=STABLE, latest=LATEST), "repeats": "auto"}
    (line, *_) = attribution.describe(load(tmp_path, data), 4)
    assert line == ("attribution: 1 bridge image(s) to build beside the matrix's 2, 4 extra cell(s) "
                    "(4 per image, repeats auto processes each)")
