"""A hub model pinned to a revision (matrix.yaml ``revision:`` with ``id:``): every from_pretrained gets it, the
record says it (``cell.revision``) and the commit it resolved to (``model_commit``, also without a revision), a
resume compares it and the report keeps rows of other revisions or commits apart.

The hub cannot be reached here: the real test builds a real offline Hugging Face cache (``HF_HOME/hub``,
``models--org--tiny-vit/refs/{main,v2}`` and two ``snapshots/<commit>/`` of ``save_pretrained`` files) and runs
``matrixbench run --backend local`` on it with ``HF_HUB_OFFLINE=1``.
"""
import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from host_helpers import make_record, small_matrix_data, write_matrix
from matrixbench.cli import main
from matrixbench.errors import MatrixError
from matrixbench.matrix import expand_cells, load_matrix
from matrixbench.run.resume import record_differences

MAIN, V2 = "1" * 40, "2" * 40   # the two snapshots' commits: refs/main and refs/v2
OLD_NS = time.time_ns() - 3600 * 10**9
IMAGE = {"latest": {"torch": "torch==2.13.0", "python": "3.12", "transformers": "transformers==5.23.0"}}


def _hub_cache(home):
    """A real HF cache under ``home``: org/tiny-vit at main (1 layer, config and preprocessor, no weights) and
    at v2 (2 layers, with its weights). A model loaded at main with weights fails: only v2 has them."""
    import transformers

    repo = home / "hub" / "models--org--tiny-vit"
    for commit, layers, weights in ((MAIN, 1, False), (V2, 2, True)):
        folder = repo / "snapshots" / commit
        config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                                        intermediate_size=37, image_size=32, patch_size=16, num_labels=3)
        if weights:
            transformers.ViTForImageClassification(config).save_pretrained(folder)
        else:
            config.save_pretrained(folder)
        transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(MAIN)
    (repo / "refs" / "v2").write_text(V2)


def _matrix(tmp_path, pinned="v2"):
    """Three models of one hub id: at main (random weights), pinned (its weights, at ``pinned``), and at main with
    weights, which main's snapshot lacks (the model check builds without weights: its cell fails saying so); and a
    local model (v2's snapshot copied, dated an hour back), whose files' hash the host and the runner remember."""
    hub = {"id": "org/tiny-vit", "task": "image-classification"}
    data = {"images": IMAGE, "weights": "random", "size": "full", "batch_sizes": [1], "modes": ["eager"],
            "iterations": 3, "warmup": 1,
            "models": {"main": hub, "pinned": {**hub, "revision": pinned, "weights": "pretrained"},
                       "at-main": {**hub, "revision": "main", "weights": "pretrained"},
                       "own": {"path": "own", "task": "image-classification"}}}
    if not (tmp_path / "own").exists():
        shutil.copytree(tmp_path / "hf" / "hub" / "models--org--tiny-vit" / "snapshots" / V2, tmp_path / "own")
        for path in (tmp_path / "own").iterdir():
            os.utime(path, ns=(OLD_NS, OLD_NS))
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run(tmp_path, *extra):
    return CliRunner().invoke(main, ["run", "--matrix", str(tmp_path / "m.yaml"), "--backend", "local", "--device",
                                     "cpu", "--results", str(tmp_path / "results"), "--hf-cache", str(tmp_path / "hf"),
                                     "--cache-dir", str(tmp_path / "compile"), *extra])


def test_each_model_loads_its_revisions_snapshot_and_its_records_say_the_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))   # the host's cache of local models' hashes
    _hub_cache(tmp_path / "hf")
    _matrix(tmp_path)
    result = _run(tmp_path)
    assert result.exit_code == 0, result.output
    folder = tmp_path / "results" / "default" / "latest"
    main_record = json.loads((folder / "main_bs1_eager_float32.json").read_text())
    pinned = json.loads((folder / "pinned_bs1_eager_float32.json").read_text())
    assert main_record["status"] == "ok" and pinned["status"] == "ok", (main_record["error"], pinned["error"])
    assert "revision" not in main_record["cell"] and main_record["model_commit"] == MAIN   # refs/main resolved
    assert pinned["cell"]["revision"] == "v2" and pinned["model_commit"] == V2   # its weights: only v2 has them
    at_main = json.loads((folder / "at-main_bs1_eager_float32.json").read_text())
    assert at_main["status"] == "error" and at_main["cell"]["revision"] == "main"   # the weights asked at main too
    assert f"cannot load 'org/tiny-vit' at revision 'main' (commit {MAIN})" in at_main["error"]["message"]
    own = json.loads((folder / "own_bs1_eager_float32.json").read_text())
    assert own["status"] == "ok" and "model_commit" not in own and own["cell"]["model_hash"].startswith("sha256:")
    for cache in (tmp_path / "xdg" / "matrixbench" / "model-hashes.json",            # the host's
                  folder / ".model-hashes" / "model-hashes.json"):                    # the runner's, in its folder
        assert [value for _, value in json.loads(cache.read_text())["entries"]] == [own["cell"]["model_hash"]]

    _matrix(tmp_path, pinned=MAIN)   # the same cells asked at another revision: the records are not resumed
    result = _run(tmp_path, "--dry-run")
    assert result.exit_code != 0
    assert "model pinned: its hub revision (revision), asked otherwise than those records'" in result.output
    assert "v2" in result.output and MAIN in result.output, result.output   # recorded and asked


@pytest.mark.parametrize("entry, words", [
    ({"config": "c.json", "revision": "v1"}, "models.mine.revision: a hub revision, but this model is a local config"),
    ({"id": "google/vit-base-patch16-224", "revision": "v1"},
     "models.vit.revision: the shipped vit with random weights is built from its shipped config"),
    ({"id": "org/x", "revision": "../main"}, "must be a hub revision"),
    ({"id": "org/x", "revision": "-rf"}, "must be a hub revision"),
])
def test_a_revision_where_no_hub_file_is_read_is_refused(tmp_path, entry, words):
    (tmp_path / "c.json").write_text(json.dumps({"model_type": "vit"}))
    data = small_matrix_data()
    name = "vit" if entry.get("id", "").startswith("google/") else "mine"
    data["models"] = {name: {"task": "image-classification", **entry}}
    with pytest.raises(MatrixError, match=words.replace(".", r"\.")):
        load_matrix(write_matrix(tmp_path, data), None)


def test_validate_names_each_pinned_hub_model(tmp_path):
    data = small_matrix_data()
    data["models"]["mine"] = {"id": "org/x", "task": "image-classification", "revision": "v1.0"}
    result = CliRunner().invoke(main, ["validate", "--matrix", str(write_matrix(tmp_path, data))])
    assert result.exit_code == 0, result.output
    assert "  model mine: hub org/x at revision v1.0, random weights, image-classification\n" in result.output


def test_a_revision_reaches_the_cell_and_leaves_other_matrices_as_they_hashed():
    data = small_matrix_data()
    before = load_matrix(_written(data), None)
    data["models"]["mine"] = {"id": "org/x", "task": "image-classification", "revision": "v1.0"}
    matrix = load_matrix(_written(data), None)
    cells = {cell.model: cell for cell in expand_cells(matrix)}
    assert cells["mine"].revision == "v1.0" and cells["mine"].to_dict()["revision"] == "v1.0"
    assert "revision" not in cells["vit"].to_dict()                        # absent where not asked
    assert "revision" not in before.to_dict()["models"]["vit"]
    assert matrix.to_dict()["models"]["mine"]["revision"] == "v1.0"


def _written(data):
    import tempfile

    return write_matrix(Path(tempfile.mkdtemp(prefix="matrixbench-revision-")), data)


def test_a_resume_compares_the_revision_both_ways():
    cell = expand_cells(load_matrix(_written(small_matrix_data()), None))[0]
    pinned = cell.__class__(**{**cell.to_dict(), "revision": "v1"})
    record = make_record(pinned).to_dict()
    assert [what for what, *_ in record_differences(record, cell, _Settings(), None)] == [
        "model vit: its hub revision (revision), asked otherwise than those records'"]   # pinned record, none asked
    assert record_differences(record, pinned, _Settings(), None) == []
    unpinned = make_record(cell).to_dict()
    assert [(recorded, asked) for _, recorded, asked in record_differences(unpinned, pinned, _Settings(), None)] == [
        (None, "v1")]


class _Settings:
    iterations, warmup, accuracy_tolerance = 5, 1, None
