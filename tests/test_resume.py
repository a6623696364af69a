"""Resume skips a recorded cell only when its record measured what this run asks."""
import pytest
from click.testing import CliRunner

from host_helpers import RecordingBackend, use_backend, write_matrix
from matrixbench.cli import main
from matrixbench.errors import ResumeConflictError
from matrixbench.matrix import Overrides, load_matrix
from matrixbench.run.command import run_matrix
from matrixbench.run.manifest import read_manifest
from test_run_folder import _options


@pytest.fixture
def matrix(tmp_path):
    return load_matrix(write_matrix(tmp_path))


def run(matrix, tmp_path, **options):
    return run_matrix(matrix, _options(tmp_path, **options))


def test_an_identical_rerun_skips_every_recorded_cell(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend())
    run(matrix, tmp_path)
    again = run(matrix, tmp_path)
    assert again.statuses() == {} and again.cells() == 16


def test_a_rerun_with_other_iterations_is_refused_naming_them(matrix, tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend())
    run(matrix, tmp_path)
    before = read_manifest(tmp_path / "results" / "r1")
    with pytest.raises(ResumeConflictError) as caught:
        run(load_matrix(matrix.path, Overrides(iterations=50, warmup=5)), tmp_path)
    message = str(caught.value)
    assert "iterations: recorded 5, this run asks 50 (16 record(s))" in message
    assert "warmup: recorded 3, this run asks 5" in message
    assert "--force" in message and "--run NAME" in message
    assert len(backend.requests) == 2                                  # nothing ran
    assert read_manifest(tmp_path / "results" / "r1") == before       # run.json not relabelled


def test_force_or_a_new_run_name_measures_afresh(matrix, tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend())
    run(matrix, tmp_path)
    changed = load_matrix(matrix.path, Overrides(iterations=50))
    run(changed, tmp_path, force=True)
    run(changed, tmp_path, run_name="r2")
    assert sum(len(request.work.cells) for request in backend.requests) == 16 * 3


def test_a_changed_image_or_cell_definition_is_refused(tmp_path, monkeypatch):
    from host_helpers import small_matrix_data

    use_backend(monkeypatch, RecordingBackend())
    data = small_matrix_data()
    data["models"] = {"hub-vit": {"id": "google/vit-base-patch16-224", "task": "image-classification"}}
    path = write_matrix(tmp_path, data)
    run(load_matrix(path), tmp_path)
    path.write_text(path.read_text().replace("torch==2.13.0", "torch==2.12.0")
                    .replace("google/vit-base-patch16-224", "google/vit-large-patch16-224"))
    with pytest.raises(ResumeConflictError) as caught:
        run(load_matrix(path), tmp_path)
    assert "image latest (content hash)" in str(caught.value)
    assert "cell model_id: recorded 'google/vit-base-patch16-224'" in str(caught.value)


def test_a_device_change_is_refused(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend(gpus=True))
    run(matrix, tmp_path, device="cpu")
    with pytest.raises(ResumeConflictError, match="device: recorded 'cpu', this run asks 'cuda'"):
        run(matrix, tmp_path, device="auto")


def test_the_cli_exits_2_and_names_the_setting(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    use_backend(monkeypatch, RecordingBackend())
    matrix_path = write_matrix(tmp_path)
    args = ["run", "--matrix", str(matrix_path), "--backend", "local", "--images", "stable"]
    assert CliRunner().invoke(main, args).exit_code == 0
    result = CliRunner().invoke(main, args + ["--iterations", "50"])
    assert result.exit_code == 2 and "iterations: recorded 5, this run asks 50" in result.stderr


class Upgraded(RecordingBackend):
    """The local backend's view after pip install -U torch: its runners import another torch than the records'
    (host_helpers.make_record's 2.13.0 / 5.23.0)."""

    def __init__(self, versions):
        super().__init__()
        self.versions = versions

    def installed_versions(self):
        return self.versions


def test_a_resume_under_another_interpreter_torch_is_refused_naming_both(matrix, tmp_path, monkeypatch):
    """--backend local runs this interpreter's torch, which no image build pins: a resume after an upgrade would
    pool two torches' processes in one cell, so it is refused (the real run and its dry run), naming both."""
    use_backend(monkeypatch, RecordingBackend())
    run(matrix, tmp_path)
    backend = use_backend(monkeypatch, Upgraded({"torch": "2.14.0+cpu", "transformers": "5.23.0"}))
    with pytest.raises(ResumeConflictError) as caught:
        run(matrix, tmp_path)
    assert "torch (this interpreter, --backend local): recorded '2.13.0', this run asks '2.14.0+cpu'" in \
        str(caught.value)
    assert "transformers" not in str(caught.value) and backend.requests == []
    use_backend(monkeypatch, Upgraded({"torch": "2.13.0", "transformers": "5.23.0"}))
    assert run(matrix, tmp_path).statuses() == {}                       # the same versions: every cell skipped


@pytest.mark.parametrize("recorded, installed, same", [
    ("2.13.0+cu130", "2.13.0", True),        # PyPI's CUDA wheel: torch.__version__ has the tag, metadata not
    ("2.13.0+cpu", "2.13.0+cpu", True),
    ("2.13.0+cpu", "2.13.0+cu130", False),   # another build of one version
    ("2.13.0", "2.14.0", False),
    ("2.13.0+cu130", "2.14.0", False),
])
def test_a_build_tag_only_one_side_has_is_the_same_build(recorded, installed, same):
    from matrixbench.run.resume import _version_differences

    record = {"environment": {"torch": recorded}}
    assert (_version_differences(record, {"torch": installed}) == []) is same


def test_the_local_backend_reads_this_interpreters_versions_from_package_metadata():
    from importlib import metadata

    from matrixbench.environments.local import LocalBackend

    versions = LocalBackend().installed_versions()
    assert versions == {"torch": metadata.version("torch"), "transformers": metadata.version("transformers")}
    assert LocalBackend(python="/other/python").installed_versions() is None


def _own_models(tmp_path):
    """A matrix of two local models: a config.json (random weights) and a save_pretrained folder (its weights)."""
    from host_helpers import small_matrix_data

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text('{"model_type": "vit", "num_hidden_layers": 2}')
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text('{"model_type": "vit", "num_hidden_layers": 2}')
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"weights one")
    data = small_matrix_data()
    data["models"] = {"mine": {"config": "cfg/config.json", "task": "image-classification"},
                      "saved": {"path": "ckpt", "task": "image-classification"}}
    return write_matrix(tmp_path, data)


def test_a_resume_after_the_local_config_changed_is_refused_naming_the_model(tmp_path, monkeypatch):
    """The same config path with other content is another model: its old records are not resumed beside new ones."""
    backend = use_backend(monkeypatch, RecordingBackend())
    path = _own_models(tmp_path)
    run(load_matrix(path), tmp_path)
    run(load_matrix(path), tmp_path)    # unchanged: resumed
    (tmp_path / "cfg" / "config.json").write_text('{"model_type": "vit", "num_hidden_layers": 4}')
    with pytest.raises(ResumeConflictError) as caught:
        run(load_matrix(path, Overrides(repeats=2)), tmp_path)
    message = str(caught.value)
    assert "model mine: its files' hash" in message and "(8 record(s))" in message
    assert "model saved" not in message
    assert sum(len(request.work.cells) for request in backend.requests) == 16   # nothing ran after the first


def test_a_resume_after_a_checkpoints_weights_changed_is_refused(tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend())
    path = _own_models(tmp_path)
    run(load_matrix(path), tmp_path)
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"weights two")
    with pytest.raises(ResumeConflictError, match="model saved: its files' hash") as caught:
        run(load_matrix(path), tmp_path)
    assert "model mine" not in str(caught.value)


def test_a_record_of_a_local_model_without_its_hash_is_not_resumed():
    """A record from before model_hash cannot show that the files are those it measured."""
    from matrixbench.run.resume import record_differences

    record = {"cell": {"model": "mine", "config_path": "/x/config.json", "task": "image-classification"},
              "settings": {"iterations": 5, "warmup": 3}, "device": "cpu"}
    cell = {**record["cell"], "config_path": "/y/config.json", "model_hash": "sha256:0123456789abcdef"}
    matrix = type("M", (), {"iterations": 5, "warmup": 3, "accuracy_tolerance": None})()
    assert [what for what, _, _ in record_differences(record, cell, matrix, "cpu")] == [
        "model mine: its files' hash (model_hash: its config, the preprocessor config beside it and, with "
        "pretrained weights, its weights), changed since those records"]
    record["cell"]["model_hash"] = cell["model_hash"]
    assert record_differences(record, cell, matrix, "cpu") == []    # the path is where, not what
