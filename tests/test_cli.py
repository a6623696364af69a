"""The command line: options, the library call each command makes, exit codes."""
import ast
import sys
import types
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import matrixbench
from host_helpers import RecordingBackend, use_backend, write_matrix
from matrixbench.cli import main
from matrixbench.errors import BuildError, DockerUnavailableError
from matrixbench.settings import BY_NAME


@pytest.fixture
def matrix_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return write_matrix(tmp_path)


def invoke(*args):
    return CliRunner().invoke(main, [str(arg) for arg in args])


def test_every_option_of_every_command_has_help():
    for name, command in main.commands.items():
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"matrixbench {name} {param.opts[0]} has no help="


def test_validate_summarises_the_matrix(matrix_file):
    result = invoke("validate", "--matrix", matrix_file, "--modes", "eager")
    assert result.exit_code == 0
    assert "4 cells per image, 8 in all" in result.stdout


def test_an_invalid_matrix_exits_2_naming_the_field(matrix_file):
    matrix_file.write_text(matrix_file.read_text().replace("- default", "- fastest"))
    result = invoke("validate", "--matrix", matrix_file)
    assert result.exit_code == 2
    assert "modes[1] must be one of" in result.stderr and result.stdout == ""


@pytest.mark.parametrize("args, words", [
    (["--images", "stable,nightly"], ["unknown name(s) nightly", "valid: stable, latest"]),
    (["--modes", "eager,turbo"], ["--modes", "turbo", "max-autotune"]),
    (["--batch-sizes", "1,x"], ["--batch-sizes", "integers"]),
    (["--size", "huge"], ["--size", "full", "tiny"]),
])
def test_bad_overrides_exit_2(matrix_file, args, words):
    result = invoke("validate", "--matrix", matrix_file, *args)
    assert result.exit_code == 2
    for word in words:
        assert word in result.stderr


def test_comma_lists_may_also_repeat(matrix_file):
    result = invoke("run", "--matrix", matrix_file, "--dry-run", "--images", "stable", "--models", "vit",
                    "--modes", "eager", "--modes", "default", "--batch-sizes", "1,4")
    assert result.exit_code == 0
    assert "stable: 4 to run, 0 done" in result.stdout
    assert "vit default bs=4 float32" in result.stdout


def test_run_uses_the_chosen_backend_and_prints_a_summary(matrix_file, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend())
    result = invoke("run", "--matrix", matrix_file, "--backend", "local", "--images", "stable",
                    "--run", "r1", "--note", "because")
    assert result.exit_code == 0, result.output
    assert [r.image.name for r in backend.requests] == ["stable"]
    assert "stable: 8 ok; 0 skipped" in result.stdout
    assert "8/8" in result.stderr  # progress
    assert (matrix_file.parent / "results" / "r1" / "run.json").exists()


def test_run_dry_run_after_a_run_has_nothing_left(matrix_file, monkeypatch):
    use_backend(monkeypatch, RecordingBackend())
    invoke("run", "--matrix", matrix_file, "--backend", "local")
    result = invoke("run", "--matrix", matrix_file, "--backend", "local", "--dry-run")
    assert "stable: 0 to run, 8 done" in result.stdout


def test_cuda_without_a_gpu_exits_5(matrix_file, monkeypatch):
    use_backend(monkeypatch, RecordingBackend(gpus=False))
    result = invoke("run", "--matrix", matrix_file, "--backend", "local", "--device", "cuda")
    assert result.exit_code == 5
    assert "--device cuda" in result.stderr


def test_an_unknown_device_is_a_usage_error_listing_the_declared_choices(matrix_file):
    result = invoke("run", "--matrix", matrix_file, "--backend", "local", "--device", "tpu")
    assert result.exit_code == 2
    assert all(f"'{device}'" in result.stderr for device in BY_NAME["device"].choices)


def test_the_valid_devices_are_checked_in_one_place_the_click_choice_of_the_setting():
    # run.py once repeated click's Choice check of --device; the host names DEVICES nowhere now.
    package = Path(matrixbench.__file__).parent
    naming = [path.name for path in package.rglob("*.py")
              if any(isinstance(node, (ast.Name, ast.alias)) and "DEVICES" in (getattr(node, "id", None),
                                                                               getattr(node, "name", None))
                     for node in ast.walk(ast.parse(path.read_text())))]
    assert naming == []
    device = next(param for param in main.commands["run"].params if param.name == "device")
    assert tuple(device.type.choices) == BY_NAME["device"].choices


def test_ctrl_c_exits_130_and_says_records_are_kept(matrix_file, monkeypatch):
    use_backend(monkeypatch, RecordingBackend(stop_after=1))
    result = invoke("run", "--matrix", matrix_file, "--backend", "local")
    assert result.exit_code == 130
    assert "finished records are kept" in result.stderr


def test_unknown_backend_is_a_usage_error(matrix_file):
    result = invoke("run", "--matrix", matrix_file, "--backend", "podman")
    assert result.exit_code == 2 and "docker" in result.stderr and "local" in result.stderr


def _fake_module(monkeypatch, name, **functions):
    module = types.ModuleType(name)
    for key, value in functions.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)


def test_build_passes_options_to_build_images(matrix_file, monkeypatch):
    calls = []

    def build_images(matrix, image_names, **options):
        calls.append((list(matrix.images), image_names, options))
        options["on_progress"]("latest", "Step 1/9")
        return ["matrixbench:latest"]

    _fake_module(monkeypatch, "matrixbench.images", build_images=build_images)
    result = invoke("build", "--matrix", matrix_file, "--images", "latest", "--no-cache", "--dry-run",
                    "--index-url", "https://mirror/simple", "--extra-index-url", "https://a",
                    "--extra-index-url", "https://b", "--base-image", "mirror/python:3.12-slim")
    assert result.exit_code == 0, result.output
    (images, names, options), = calls
    assert images == names == ["latest"]
    on_progress = options.pop("on_progress")
    assert callable(on_progress) and "[latest] Step 1/9" in result.stderr
    assert options == {"no_cache": True, "dry_run": True, "ca_bundle": None, "index_url": "https://mirror/simple",
                       "extra_index_urls": ("https://a", "https://b"), "base_image": "mirror/python:3.12-slim"}


@pytest.mark.parametrize("error, code", [(DockerUnavailableError("start it: sudo systemctl start docker"), 3),
                                         (BuildError("pip failed"), 4)])
def test_build_errors_map_to_their_exit_codes(matrix_file, monkeypatch, error, code):
    def build_images(*args, **kwargs):
        raise error

    _fake_module(monkeypatch, "matrixbench.images", build_images=build_images)
    result = invoke("build", "--matrix", matrix_file)
    assert result.exit_code == code and str(error) in result.stderr


def test_a_command_whose_module_is_missing_says_so(matrix_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "matrixbench.clean", None)  # import fails
    result = invoke("clean")
    assert result.exit_code == 1 and "`matrixbench clean` is not available" in result.stderr


def test_report_defaults_to_results_default_and_every_format(matrix_file, monkeypatch, tmp_path):
    calls = []
    _fake_module(monkeypatch, "matrixbench.report",
                 build_report=lambda dirs, out, formats, prices: (calls.append((dirs, out, formats))
                                                                  or [out / "report.md"]))
    (tmp_path / "results" / "default").mkdir(parents=True)
    result = invoke("report")
    assert result.exit_code == 0, result.output
    assert calls == [([Path("results/default")], Path("report"), ["md", "html", "csv"])]
    assert "report.md" in result.stdout
    result = invoke("report", "results/default", "--out", "r2", "--format", "md,csv")
    assert calls[-1][2] == ["md", "csv"]


def test_clean_lists_what_it_removes(monkeypatch):
    calls = []

    def clean(**options):
        calls.append(options)
        return ["container abc123"]

    _fake_module(monkeypatch, "matrixbench.clean", clean=clean)
    result = invoke("clean", "--images", "--run", "r1", "--dry-run")
    assert result.exit_code == 0 and "would remove container abc123" in result.stdout
    assert "nothing to remove" not in result.stdout
    assert calls == [{"images": True, "run_id": "r1", "dry_run": True}]


def test_a_run_whose_every_cell_failed_exits_5(matrix_file, monkeypatch):
    use_backend(monkeypatch, RecordingBackend(statuses={"vit": "error", "detr-resnet-101": "error"}))
    result = invoke("run", "--matrix", matrix_file, "--backend", "local", "--images", "stable")
    assert result.exit_code == 5
    assert "8 of 8 cells failed" in result.stderr


def test_dry_run_after_failures_says_how_many_are_failures(matrix_file, monkeypatch):
    use_backend(monkeypatch, RecordingBackend(statuses={"vit": "error"}))
    invoke("run", "--matrix", matrix_file, "--backend", "local", "--images", "stable")
    result = invoke("run", "--matrix", matrix_file, "--backend", "local", "--images", "stable", "--dry-run")
    assert "4 recorded cells are failures; --retry-failed reruns them" in result.stdout


def test_build_backend_venv_builds_venvs_from_the_same_options(matrix_file, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    result = invoke("build", "--backend", "venv", "--matrix", matrix_file, "--images", "stable", "--dry-run",
                    "--extra-index-url", "https://a/simple", "--base-image", "mirror/python:3.10-slim")
    assert result.exit_code == 0, result.output
    assert "--base-image is for Docker builds" in result.stderr
    venvs = tmp_path / "cache" / "matrixbench" / "venvs"
    assert f"[stable] {venvs}/stable-" in result.stderr
    assert "[stable]   EXTRA_INDEX_URLS=https://a/simple" in result.stderr
    assert not venvs.exists()


def test_clean_venvs_removes_the_venvs_and_touches_no_docker(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setitem(sys.modules, "matrixbench.clean", None)  # Docker's clean is not called
    (tmp_path / "matrixbench" / "venvs" / "stable-0123456789ab" / "bin").mkdir(parents=True)
    result = invoke("clean", "--venvs", "--dry-run")
    assert result.exit_code == 0 and "would remove venv" in result.output
    assert invoke("clean", "--venvs").exit_code == 0
    assert list((tmp_path / "matrixbench" / "venvs").iterdir()) == []
    assert "nothing to remove" in invoke("clean", "--venvs").output
    assert invoke("clean", "--venvs", "--images").exit_code == 2


def test_build_and_run_share_one_declaration_of_the_build_options():
    def build_params(name):
        return {p.name: (p.opts, p.help) for p in main.commands[name].params
                if p.name in ("ca_bundle", "index_url", "extra_index_urls", "base_image")}

    assert len(build_params("build")) == 4
    assert build_params("build") == build_params("run")


def test_run_refuses_build_options_without_ray(tmp_path):
    bundle = tmp_path / "ca.pem"
    bundle.write_bytes(b"synthetic PEM")
    result = invoke("run", "--matrix", write_matrix(tmp_path), "--backend", "local", "--device", "cpu",
                    "--results", tmp_path / "results", "--ca-bundle", bundle)
    assert result.exit_code != 0
    assert "only with --executor ray" in result.output, result.output
    assert not (tmp_path / "results").exists()


# --- run's options in groups, --set --------------------------------------------------------

def test_every_run_option_declares_a_group_or_leaves_the_help():
    from matrixbench.cli import RUN_GROUPS, RUN_RARE, run

    grouped = [name for names in RUN_GROUPS.values() for name in names]
    names = [param.name for param in run.params if param.name != "help"]
    assert sorted(grouped + list(RUN_RARE)) == sorted(names)          # each option declared once
    shown = [param.name for param in run.params if not getattr(param, "hidden", False)]
    assert len(shown) <= 25 and set(shown) == set(grouped)


def test_run_help_lists_the_groups_in_order_and_not_the_rare_options():
    text = invoke("run", "--help").output
    headings = [line for line in text.splitlines() if line.endswith("options:")]
    assert headings == ["Selection options:", "Measurement options:", "Resume and paths options:",
                        "Placement options:", "Environment options:", "Other options:"]
    assert "--warmup" not in text and "--base-image" not in text and "--set KEY=VALUE" in text


def test_set_reaches_any_matrix_setting_and_a_rare_flag_still_works(tmp_path):
    from matrixbench.matrix import Overrides, load_matrix

    path = write_matrix(tmp_path)
    result = invoke("validate", "--matrix", path, "--set", "fullgraph=true", "--set", "cv_threshold=0.05",
                    "--warmup", "2")
    assert result.exit_code == 0, result.output
    matrix = load_matrix(path, Overrides(warmup=2, sets={"fullgraph": True, "cv_threshold": 0.05}))
    assert (matrix.fullgraph, matrix.cv_threshold, matrix.warmup) == (True, 0.05, 2)


@pytest.mark.parametrize("given, message", [
    ("colour=red", "KEY one of weights, size"),
    ("fullgraph", "give KEY=VALUE"),
    ("cv_threshold=-1", "--set cv_threshold"),
])
def test_a_bad_set_names_the_key_and_the_fix(tmp_path, given, message):
    result = invoke("validate", "--matrix", write_matrix(tmp_path), "--set", given)
    assert result.exit_code == 2 and message in result.output, result.output
