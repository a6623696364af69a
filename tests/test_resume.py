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


def test_a_changed_image_or_cell_definition_is_refused(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend())
    run(matrix, tmp_path)
    path = tmp_path / "matrix.yaml"
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
