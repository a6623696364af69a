"""The GPU-type axis (issue 16): declared once, a folder level of the run, only with --executor ray."""
import pytest
from click.testing import CliRunner

from host_helpers import RecordingBackend, make_record, small_matrix_data, use_backend, write_matrix
from matrixbench.cli import main
from matrixbench.errors import MatrixError, OptionConflictError
from matrixbench.matrix import Overrides, load_matrix
from matrixbench.report.records import run_folder_of
from matrixbench.run.command import RunOptions, run_matrix
from matrixbench.run.pending import pending_work
from runner.schema import write_record


def test_gpu_types_come_from_the_file_or_the_flag(tmp_path):
    data = dict(small_matrix_data(), gpu_types=["A100", "T4"])
    assert load_matrix(write_matrix(tmp_path, data)).gpu_types == ("A100", "T4")
    overridden = load_matrix(write_matrix(tmp_path, data), Overrides(gpu_types=["V100"]))
    assert overridden.gpu_types == ("V100",)
    assert load_matrix(write_matrix(tmp_path)).gpu_types == ()


def test_a_gpu_type_must_be_usable_as_a_folder_name(tmp_path):
    with pytest.raises(MatrixError, match="A100/80G.*letters, digits"):
        load_matrix(write_matrix(tmp_path), Overrides(gpu_types=["A100/80G"]))


def test_a_matrix_without_the_axis_hashes_as_before(tmp_path):
    plain = load_matrix(write_matrix(tmp_path))
    assert "gpu_types" not in plain.to_dict()
    typed = load_matrix(write_matrix(tmp_path), Overrides(gpu_types=["T4"]))
    assert typed.to_dict()["gpu_types"] == ("T4",) and typed.content_hash() != plain.content_hash()


def test_each_gpu_type_gets_its_own_image_folders_and_resume(tmp_path):
    matrix = load_matrix(write_matrix(tmp_path), Overrides(gpu_types=["A100", "T4"]))
    run_path = tmp_path / "results" / "r"
    plans = pending_work(matrix, run_path)
    assert [(p.label, p.out_dir) for p in plans] == [
        ("A100/stable", run_path / "A100" / "stable"), ("A100/latest", run_path / "A100" / "latest"),
        ("T4/stable", run_path / "T4" / "stable"), ("T4/latest", run_path / "T4" / "latest")]
    first = plans[0].pending[0]
    write_record(plans[0].out_dir, make_record(first.cell))   # recorded on A100 only
    again = {p.label: p for p in pending_work(matrix, run_path)}
    assert first not in again["A100/stable"].pending and again["A100/stable"].done == 1
    assert first in again["T4/stable"].pending and again["T4/stable"].done == 0


def test_other_backends_refuse_the_axis_naming_the_ray_backend(tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend())
    matrix = load_matrix(write_matrix(tmp_path), Overrides(gpu_types=["A100"]))
    with pytest.raises(OptionConflictError, match="only --executor ray places work on GPU types"):
        run_matrix(matrix, RunOptions(results_root=tmp_path / "results", backend="local"))
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("dry_run", [["--dry-run"], []])
def test_the_cli_takes_gpu_types_and_refuses_them_without_ray_a_usage_error(tmp_path, dry_run):
    path = write_matrix(tmp_path)
    result = CliRunner().invoke(main, ["run", "--matrix", str(path), "--gpu-types", "A100,T4", "--backend", "local",
                                       "--device", "cpu", *dry_run, "--results", str(tmp_path / "r")])
    assert result.exit_code == 2 and "gpu_types A100,T4: only --executor ray" in result.output


def test_the_report_finds_the_run_folder_above_the_gpu_type(tmp_path):
    run_path = tmp_path / "results" / "r"
    (run_path / "T4" / "stable").mkdir(parents=True)
    (run_path / "run.json").write_text("{}")
    assert run_folder_of(run_path / "T4" / "stable" / "x.json") == run_path
    assert run_folder_of(run_path / "stable" / "x.json") == run_path


def test_the_report_keeps_cpu_records_of_two_gpu_types_nodes_apart():
    from matrixbench.report.records import device_name

    row = {"device": "cpu", "environment.cpu_model": "EPYC", "environment.gpu_name": None}
    assert device_name(row) == "CPU (EPYC)"
    assert device_name(dict(row, **{"placement.gpu_type": "T4"})) == "CPU (EPYC) of a T4 node"
    gpu = {"device": "cuda", "environment.gpu_name": "Tesla T4", "placement.gpu_type": "T4"}
    assert device_name(gpu) == "Tesla T4"
