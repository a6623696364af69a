"""validate --build: every model built on the meta device by the runner; failures named by model."""
import json

from click.testing import CliRunner

from host_helpers import small_matrix_data, write_matrix
from matrixbench.cli import main


def test_validate_build_names_each_model_that_does_not_build(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "unknown.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    data = small_matrix_data()
    data["models"] = {"vit": data["models"]["vit"],
                      "mine": {"config": "unknown.json", "task": "image-classification"}}
    result = CliRunner().invoke(main, ["validate", "--matrix", str(write_matrix(tmp_path, data)), "--build"])
    assert result.exit_code == 2, result.output
    assert "model vit: builds on the meta device" in result.stdout
    assert "1 model(s) of the matrix do not build" in result.stderr
    assert "model mine: does not build: ModelError: config model_type='no-such-architecture'" in result.stderr
