"""The files matrixbench ships (templates, Docker build files, runner/): found, or a clear error."""
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import runner
from matrixbench import resources
from matrixbench.build import images
from matrixbench.cli import main
from matrixbench.errors import BuildError, ReportError, RunError
from matrixbench.report.published import COLUMNS, load_published

FIXTURES = Path(__file__).parent / "fixtures"


def test_resources_are_found_in_the_imported_packages():
    checkout = Path(resources.__file__).parents[1]
    assert resources.templates_dir() == checkout / "templates"
    assert {path.name for path in resources.templates_dir().iterdir()} >= {"report.md.j2", "report.html.j2"}
    assert [path.parent for path in resources.docker_build_files()] == [checkout / "images"] * 3
    assert resources.runner_dir() == Path(runner.__file__).parent


def _installed_package(tmp_path, monkeypatch, shipped=True, checkout=False):
    """A package folder as a wheel installs it (``_shipped/`` inside) or as a checkout holds it."""
    package = tmp_path / "site" / "matrixbench"
    package.mkdir(parents=True)
    if shipped:
        for name in ("templates", "images"):
            (package / "_shipped" / name).mkdir(parents=True)
    if checkout:
        (tmp_path / "site" / "pyproject.toml").write_text("")
        for name in ("templates", "images"):
            (tmp_path / "site" / name).mkdir()
    monkeypatch.setattr(resources.resources, "files", lambda name: package)
    return package


def test_a_wheel_finds_templates_and_images_inside_the_package(tmp_path, monkeypatch):
    package = _installed_package(tmp_path, monkeypatch, checkout=True)
    assert resources.shipped_dir("templates", error=ReportError) == package / "_shipped" / "templates"
    assert resources.shipped_dir("images", error=BuildError) == package / "_shipped" / "images"


def test_a_checkout_finds_them_beside_the_package(tmp_path, monkeypatch):
    _installed_package(tmp_path, monkeypatch, shipped=False, checkout=True)
    assert resources.shipped_dir("templates", error=ReportError) == tmp_path / "site" / "templates"


def test_a_folder_beside_an_installed_package_is_not_taken_for_a_checkout(tmp_path, monkeypatch):
    # site-packages/templates of some other package: no pyproject.toml beside it, so not ours
    _installed_package(tmp_path, monkeypatch, shipped=False)
    (tmp_path / "site" / "templates").mkdir()
    with pytest.raises(ReportError, match="lacks files it ships.*templates/ is in neither"):
        resources.templates_dir()


def test_the_published_tables_are_found_in_the_imported_package():
    data = Path(resources.__file__).parent / "data"
    assert resources.published_dataset() == data / "published_torch_compile.csv"
    assert resources.published_seed() == data / "perf_torch_compile.md"


def test_the_report_reads_the_published_dataset_through_importlib_resources(tmp_path, monkeypatch):
    # published.py once found its data by Path(__file__), beside whatever file it was loaded from.
    (tmp_path / "data").mkdir()
    row = {"table": "main", "torch": "2.0", "gpu": "A100", "batch_size": "1", "model_label": "Image Classification/ViT",
           "model": "vit", "mode": "eager", "status": "ok", "latency_ms": "9.5", "note": ""}
    (tmp_path / "data" / "published_torch_compile.csv").write_text(
        ",".join(COLUMNS) + "\n" + ",".join(row[column] for column in COLUMNS) + "\n")
    monkeypatch.setattr(resources.resources, "files", lambda package: tmp_path)
    frame = load_published()
    assert frame.to_dict("records") == [{**row, "batch_size": 1, "latency_ms": 9.5}]
    (tmp_path / "data" / "published_torch_compile.csv").unlink()
    with pytest.raises(ReportError, match="lacks files it ships.*published_torch_compile.csv missing"):
        load_published()


def test_a_missing_folder_is_the_error_asked_for():
    with pytest.raises(RunError, match="lacks files it ships.*matrixbench/nowhere is not a folder"):
        resources.package_dir("matrixbench", "nowhere", error=RunError)
    with pytest.raises(BuildError, match="lacks files.*No module named 'no_such_package'"):
        resources.package_dir("no_such_package", error=BuildError)


def test_a_missing_docker_build_file_is_a_build_error(tmp_path, monkeypatch):
    package = _installed_package(tmp_path, monkeypatch)
    (package / "_shipped" / "images" / "Dockerfile").write_text("FROM x\n")
    with pytest.raises(BuildError, match="pip-install.sh missing"):
        images.build_context()


def test_a_missing_template_exits_6_with_a_message_not_a_traceback(tmp_path, monkeypatch):
    monkeypatch.setattr(resources, "templates_dir", lambda: tmp_path)
    result = CliRunner().invoke(main, ["report", str(FIXTURES / "cpu-run"), "--out", str(tmp_path / "out"),
                                       "--format", "md"])
    assert result.exit_code == 6
    assert f"report template report.md.j2 not found in {tmp_path}" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_the_build_context_takes_runner_from_the_runner_package():
    with tarfile.open(fileobj=images.build_context()) as tar:
        names = set(tar.getnames())
    shipped = {f"runner/{path.relative_to(resources.runner_dir()).as_posix()}"
               for path in resources.runner_dir().rglob("*")
               if path.is_file() and "__pycache__" not in path.parts}
    assert shipped <= names
    assert "runner/configs/vit/config.json" in names
