"""The command line: options, the library call each command makes, exit codes."""
import ast
import sys
import types
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import matrixbench
from host_helpers import RecordingBackend, small_matrix_data, use_backend, write_matrix
from matrixbench.cli import main
from matrixbench.errors import BuildError, DockerUnavailableError, FolderError
from matrixbench.matrix.settings import BY_NAME


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


def test_validate_says_where_each_local_model_comes_from_and_its_files_hash(matrix_file, tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text('{"model_type": "vit"}')
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"weights")
    data = small_matrix_data()
    data["models"]["mine"] = {"config": "ckpt/config.json", "task": "image-classification"}
    data["models"]["saved"] = {"path": "ckpt", "task": "image-classification"}
    result = invoke("validate", "--matrix", write_matrix(tmp_path, data))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    mine = next(line for line in lines if line.startswith("  model mine: "))
    saved = next(line for line in lines if line.startswith("  model saved: "))
    assert mine.startswith(f"  model mine: config {tmp_path / 'ckpt' / 'config.json'}, random weights, "
                           "image-classification, files sha256:")
    assert saved.startswith(f"  model saved: folder {tmp_path / 'ckpt'}, pretrained weights, image-classification, "
                            "files sha256:")
    assert not any(line.startswith("  model vit") for line in lines)   # a shipped model: its name says it


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
    (["--set", "repeats=abc"], ["--set repeats must be 'auto' or an integer >= 1", "got 'abc'"]),
    (["--set", "iterations=true"], ["--set iterations must be an integer, got true (a boolean)"]),   # not "True"
    (["--set", "iterations=null"], ["--set iterations must be an integer, got null (no value)"]),
    (["--repeats-min", "5", "--repeats-max", "2"], ["--repeats-max 2 leaves repeats_min 5 > repeats_max 2"]),
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


def _on_a_gpu_host(monkeypatch):
    """This host has an H100 (the nvidia-smi of tests/gpu_fakes) and the backend can give it."""
    from gpu_fakes import query_gpu
    from matrixbench.gpu import parse_gpus

    gpus = parse_gpus(query_gpu("H100", "550"))
    monkeypatch.setattr("matrixbench.run.dry_run.host_gpus", lambda: gpus)
    monkeypatch.setattr("matrixbench.run.command.host_gpus", lambda: gpus)
    use_backend(monkeypatch, RecordingBackend(gpus=True))


def _estimate_line(result):
    return next(line for line in result.stdout.splitlines() if line.startswith("estimated duration"))


def test_a_gpu_dry_run_says_the_noise_check_and_its_bill_includes_it(matrix_file, monkeypatch):
    """Issue 32: a real GPU run spends about NOISE_CHECK_S on the host-noise check before its bill; the dry run
    says so (and how to skip it), and its estimate counts it; with --no-noise-check it says the check is skipped
    and the estimate leaves it out."""
    from matrixbench.host_noise import PROBE_S
    from matrixbench.run.noise_check import PROBE_START_S

    _on_a_gpu_host(monkeypatch)
    args = ("run", "--matrix", matrix_file, "--backend", "local", "--images", "stable", "--dry-run")
    checked, skipped = invoke(*args), invoke(*args, "--no-noise-check")
    assert checked.exit_code == skipped.exit_code == 0, (checked.output, skipped.output)
    seconds = PROBE_S + PROBE_START_S     # no record here shows a runner's start yet
    assert (f"noise check: a real run first spends about {seconds:.0f} s measuring this host's noise"
            in checked.stdout and "--no-noise-check skips it" in checked.stdout)
    assert f"a runner's start, taken as {PROBE_START_S:.0f} s: no record here shows one yet" in checked.stdout
    assert f"the noise check first, {seconds:.0f} s" in _estimate_line(checked)
    assert "noise check: none (--no-noise-check)" in skipped.stdout
    assert "noise check first" not in _estimate_line(skipped)
    assert checked.stdout.index("noise check:") < checked.stdout.index("estimated duration")


def test_the_noise_checks_time_takes_a_runners_start_as_measured_here_where_the_records_show_one():
    """The check is PROBE_S and a runner's start: Estimates.runner_start_s where this run's records show one (a
    slow host's 30 s start is in the bill), the generic PROBE_START_S only where none does."""
    from matrixbench.host_noise import PROBE_S
    from matrixbench.run.noise_check import PROBE_START_S, plan_check

    measure, skipped = plan_check(True, [object()], True, None), plan_check(True, [object()], False, None)
    assert measure.seconds(30.0) == PROBE_S + 30.0 and measure.seconds(None) == PROBE_S + PROBE_START_S
    assert skipped.seconds(30.0) == 0.0
    assert f"about {PROBE_S + 30:.0f} s" in measure.dry_run_line(30.0)
    assert "a runner's start as measured here, 30 s" in measure.dry_run_line(30.0)


def test_a_gpu_dry_run_bills_the_noise_check_with_the_runner_start_its_records_show(matrix_file, monkeypatch):
    """Where this run's records show runners starting (a gap between one record's end and the next one's start),
    the dry run's noise-check line and its estimate take that start, not the generic PROBE_START_S."""
    import json
    from datetime import datetime, timedelta, timezone

    from matrixbench.host_noise import PROBE_S

    _on_a_gpu_host(monkeypatch)
    assert invoke("run", "--matrix", matrix_file, "--backend", "local", "--images", "stable",
                  "--batch-sizes", "1").exit_code == 0
    base = datetime(2026, 11, 27, 12, 0, tzinfo=timezone.utc)
    paths = sorted((matrix_file.parent / "results" / "default" / "stable").glob("*.json"))
    assert len(paths) >= 3
    for index, path in enumerate(paths):       # records 20 s apart, each 8 s long: runners starting 12 s
        record = json.loads(path.read_text())
        record.update(started_at=(base + timedelta(seconds=20 * index)).isoformat(timespec="seconds"),
                      duration_s=8.0)
        path.write_text(json.dumps(record))
    result = invoke("run", "--matrix", matrix_file, "--backend", "local", "--images", "stable", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "a runner's start as measured here, 12 s" in result.stdout
    assert f"noise check: a real run first spends about {PROBE_S + 12:.0f} s" in result.stdout
    assert f"the noise check first, {PROBE_S + 12:.0f} s" in _estimate_line(result)


def test_a_cpu_dry_run_says_no_noise_check_runs(matrix_file, monkeypatch):
    _on_a_gpu_host(monkeypatch)
    result = invoke("run", "--matrix", matrix_file, "--backend", "local", "--device", "cpu", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "noise check: none (a CPU run checks nothing; --device cpu" in result.stdout
    assert "noise check first" not in _estimate_line(result)


@pytest.mark.parametrize("args, words", [
    (["--iterations", "50"], ["measured differently", "iterations: recorded 5, this run asks 50"]),
    (["--device", "cuda"], ["--device cuda", "no NVIDIA GPU"]),
])
def test_a_dry_run_refuses_a_resume_as_the_real_run_does(matrix_file, monkeypatch, args, words):
    use_backend(monkeypatch, RecordingBackend())
    assert invoke("run", "--matrix", matrix_file, "--backend", "local", "--device", "cpu").exit_code == 0
    dry = invoke("run", "--matrix", matrix_file, "--backend", "local", "--dry-run", *args)
    real = invoke("run", "--matrix", matrix_file, "--backend", "local", *args)
    assert dry.exit_code == real.exit_code != 0
    assert real.stderr.endswith(dry.stderr) and dry.stderr.startswith("error: ") and dry.stdout == ""
    assert all(word in dry.stderr for word in words)


@pytest.mark.parametrize("extra, words", [
    ([], ["image 'stable' pins torch==2.0.1", "--backend local runs this interpreter's torch"]),
    (["--images", "latest", "--slots", "1000"], ["--slots 1000", "usable core(s) cannot give 1000 slot(s)"]),
])
def test_a_dry_run_refuses_another_torch_and_more_slots_than_cores_as_the_real_run_does(matrix_file, extra, words):
    # issue 33: the real local backend (no fake), whose interpreter's torch is not stable's 2.0.1
    args = ("run", "--matrix", matrix_file, "--backend", "local", "--device", "cpu", *extra)
    dry, real = invoke(*args, "--dry-run"), invoke(*args)
    assert dry.exit_code == real.exit_code != 0
    assert dry.stderr.startswith("error: ") and real.stderr.endswith(dry.stderr) and dry.stdout == ""
    assert all(word in dry.stderr for word in words)
    assert not list((matrix_file.parent / "results").rglob("*_float32*.json"))   # nothing ran


@pytest.mark.parametrize("executor, fix", [("ray", "--executor slots"), ("sequential", "--executor slots")])
def test_a_dry_run_refuses_options_the_executor_would_ignore_as_the_real_run_does_exit_2(matrix_file, monkeypatch,
                                                                                        executor, fix):
    use_backend(monkeypatch, RecordingBackend())
    args = ("run", "--matrix", matrix_file, "--backend", "local", "--executor", executor, "--slots", "2")
    dry, real = invoke(*args, "--dry-run"), invoke(*args)
    assert dry.exit_code == real.exit_code == 2   # a usage error (errors.OptionConflictError)
    assert dry.stderr == real.stderr and f"--slots / slots: not with --executor {executor}" in dry.stderr
    assert fix in dry.stderr
    assert not (matrix_file.parent / "results").exists()


@pytest.mark.parametrize("args, flag", [
    (["report", "--out", "/proc/matrixbench-x", "--format", "md"], "--out"),
    (["selftest", "--device", "cpu", "--results", "/proc/matrixbench-x"], "--results"),
])
def test_a_folder_the_file_system_refuses_exits_9_naming_the_option(matrix_file, monkeypatch, args, flag):
    use_backend(monkeypatch, RecordingBackend())
    assert invoke("run", "--matrix", matrix_file, "--backend", "local", "--images", "stable").exit_code == 0
    result = invoke(*args[:1], *(["results/default"] if args[0] == "report" else []), *args[1:])
    assert result.exit_code == 9, result.output
    assert result.stderr.startswith(f"error: {flag}: /proc/matrixbench-x: No such file or directory")
    assert f"choose another {flag}" in result.stderr and len(result.stderr.splitlines()) == 1


def test_an_os_error_in_the_folder_an_option_chose_names_it_one_elsewhere_is_left_as_it_is(tmp_path):
    from matrixbench.cli import names_folder

    with pytest.raises(FileNotFoundError):
        with names_folder("--out", tmp_path / "report"):
            open(tmp_path / "elsewhere" / "x")
    with pytest.raises(FolderError, match=r"^--out: .*/report/a/x: No such file or directory; choose another --out$"):
        with names_folder("--out", tmp_path / "report"):
            open(tmp_path / "report" / "a" / "x", "w")


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
    # run/command.py once repeated click's Choice check of --device; the host names DEVICES nowhere now.
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

    _fake_module(monkeypatch, "matrixbench.build.images", build_images=build_images)
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

    _fake_module(monkeypatch, "matrixbench.build.images", build_images=build_images)
    result = invoke("build", "--matrix", matrix_file)
    assert result.exit_code == code and str(error) in result.stderr


def test_a_command_whose_module_is_missing_says_so(matrix_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "matrixbench.build.clean", None)  # import fails
    result = invoke("clean")
    assert result.exit_code == 1 and "`matrixbench clean` is not available" in result.stderr


def test_report_defaults_to_results_default_and_every_format(matrix_file, monkeypatch, tmp_path):
    calls = []
    _fake_module(monkeypatch, "matrixbench.report",
                 build_report=lambda dirs, out, formats, prices, margin_pct: (calls.append((dirs, out, formats))
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

    _fake_module(monkeypatch, "matrixbench.build.clean", clean=clean)
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
    assert "base_image is for Docker builds" in result.stderr
    venvs = tmp_path / "cache" / "matrixbench" / "venvs"
    assert f"[stable] {venvs}/stable-" in result.stderr
    assert "[stable]   EXTRA_INDEX_URLS=https://a/simple" in result.stderr
    assert not venvs.exists()


def test_clean_venvs_removes_the_venvs_and_touches_no_docker(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setitem(sys.modules, "matrixbench.build.clean", None)  # Docker's clean is not called
    (tmp_path / "matrixbench" / "venvs" / "stable-0123456789ab" / "bin").mkdir(parents=True)
    result = invoke("clean", "--venvs", "--dry-run")
    assert result.exit_code == 0 and "would remove venv" in result.output
    assert invoke("clean", "--venvs").exit_code == 0
    assert list((tmp_path / "matrixbench" / "venvs").iterdir()) == []
    assert "nothing to remove" in invoke("clean", "--venvs").output
    assert invoke("clean", "--venvs", "--images").exit_code == 2


def test_builds_flags_derive_from_the_build_settings_and_run_has_none_of_them():
    from matrixbench.matrix.settings import BUILD_FLAGS, BUILD_SETTINGS

    build = {p.name: p for p in main.commands["build"].params}
    for setting in BUILD_FLAGS:
        assert build[setting.name].opts == [setting.flag] and setting.help in build[setting.name].help
    run_names = {p.name for p in main.commands["run"].params}
    assert not run_names & {setting.name for setting in BUILD_SETTINGS}


@pytest.mark.parametrize("given, home", [
    (["--index-url", "https://user:tok@mirror/simple"], "`matrixbench build --index-url ...`, or `index_url:` in "
                                                        "matrix.yaml or --set index_url=VALUE"),
    (["--index-url=https://mirror/simple"], "`index_url:` in matrix.yaml"),
    (["--extra-index-url", "https://a/simple"], "`matrixbench build --extra-index-url ...`"),
    (["--base-image", "mirror/python:3.10-slim"], "`base_image:` in matrix.yaml or --set base_image=VALUE"),
    (["--ca-bundle", "ca.pem"], "`matrixbench build --ca-bundle ...`"),
    (["--registry", "10.0.0.1:5000"], "`registry:` in matrix.yaml or --set registry=VALUE"),
])
def test_run_refuses_a_build_option_naming_where_it_goes_now(tmp_path, given, home):
    result = invoke("run", "--matrix", write_matrix(tmp_path), "--backend", "local", "--device", "cpu",
                    "--results", tmp_path / "results", *given)
    assert result.exit_code == 2 and "No such option" not in result.output, result.output
    flag = given[0].split("=")[0]
    assert f"{flag} is a build " in result.stderr and home in result.stderr, result.stderr
    assert "tok" not in result.output and not (tmp_path / "results").exists()


def _with_build_settings(tmp_path, **build):
    data = dict(small_matrix_data(), **build)
    return write_matrix(tmp_path, data)


def test_build_reads_the_matrix_build_settings_and_its_flags_and_set_override_them(tmp_path, monkeypatch):
    calls = []
    _fake_module(monkeypatch, "matrixbench.build.images",
                 build_images=lambda matrix, names, **options: calls.append(options) or [])
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.pem").write_bytes(b"synthetic PEM")
    path = _with_build_settings(tmp_path, index_url="https://mirror/simple", extra_index_urls=["https://a/simple"],
                                base_image="mirror/python:{python}-slim", ca_bundle="certs/ca.pem")
    monkeypatch.chdir(tmp_path / "certs")   # the matrix's relative CA bundle is the matrix file's, not the cwd's
    assert invoke("build", "--matrix", path, "--dry-run").exit_code == 0
    assert {key: calls[-1][key] for key in ("index_url", "extra_index_urls", "base_image", "ca_bundle")} == {
        "index_url": "https://mirror/simple", "extra_index_urls": ("https://a/simple",),
        "base_image": "mirror/python:{python}-slim", "ca_bundle": str(tmp_path / "certs" / "ca.pem")}
    result = invoke("build", "--matrix", path, "--dry-run", "--index-url", "https://other/simple",
                    "--set", "base_image=m2/python:3.10", "--ca-bundle", "ca.pem")
    assert result.exit_code == 0, result.output
    assert calls[-1]["index_url"] == "https://other/simple" and calls[-1]["base_image"] == "m2/python:3.10"
    assert calls[-1]["ca_bundle"] == str(tmp_path / "certs" / "ca.pem")   # the flag's: this directory's
    result = invoke("build", "--matrix", path, "--dry-run", "--index-url", "ftp://mirror/simple")
    assert result.exit_code == 2 and "--index-url" in result.stderr and "http(s) URL" in result.stderr


def test_validate_shows_the_build_settings_with_credentials_hidden(tmp_path):
    path = _with_build_settings(tmp_path, index_url="https://user:s3cret-token@mirror/simple")
    result = invoke("validate", "--matrix", path)
    assert result.exit_code == 0 and "build: index_url https://***@mirror/simple" in result.stdout
    assert "s3cret" not in result.output


def test_run_backend_auto_builds_with_the_matrix_build_settings_and_records_them_redacted(tmp_path, monkeypatch):
    from matrixbench.build import images, venvs
    from matrixbench.environments import auto

    seen = {}

    def failing(kind):
        def build(matrix, names, **options):
            seen[kind] = {**options, "pem": Path(options["ca_bundle"]).read_bytes()}
            on_progress = options.pop("on_progress")
            on_progress("latest", f"pip: cannot reach {options['index_url']}")
            raise BuildError(f"{kind}: no index reachable at {options['index_url']}")   # the note quotes it
        return build

    monkeypatch.setattr(auto, "this_machine", lambda skip: auto.Machine(gpu=False, docker=True))
    monkeypatch.setattr(images, "build_images", failing("docker"))
    monkeypatch.setattr(venvs, "build_venvs", failing("venv"))
    use_backend(monkeypatch, RecordingBackend())
    (tmp_path / "ca.pem").write_bytes(b"synthetic PEM")
    path = _with_build_settings(tmp_path, ca_bundle="ca.pem")
    result = invoke("run", "--matrix", path, "--backend", "auto", "--device", "cpu", "--results", tmp_path / "results",
                    "--set", "index_url=https://user:s3cret-token@mirror/simple")
    assert result.exit_code == 0, result.output
    assert seen["docker"]["index_url"] == seen["venv"]["index_url"] == "https://user:s3cret-token@mirror/simple"
    assert seen["docker"]["pem"] == seen["venv"]["pem"] == b"synthetic PEM" and "base_image" not in seen["venv"]
    run_json = (tmp_path / "results" / "default" / "run.json").read_text()
    assert "s3cret" not in run_json and "https://***@mirror/simple" in run_json and "s3cret" not in result.output
    assert "[latest] pip: cannot reach https://***@mirror/simple" in result.output   # shown, hidden
    assert "no index reachable at https://***@mirror/simple" in result.output        # the banner's note


@pytest.mark.parametrize("backend, sets, registry, index_url", [
    ("docker", [], None, "https://mirror/simple"),                        # the nodes build, with the mirror
    ("docker", ["--set", "registry=10.0.0.1:5000"], "10.0.0.1:5000", None),   # the nodes pull: nothing to build
    ("local", [], None, None),                                            # local nodes build nothing
])
def test_a_ray_run_takes_the_registry_or_the_node_builds_settings_from_the_matrix(
        tmp_path, monkeypatch, backend, sets, registry, index_url):
    import matrixbench.cli as cli

    given = []
    monkeypatch.setattr(cli, "run_matrix", lambda matrix, options, progress: given.append(options) or Summary())
    path = _with_build_settings(tmp_path, index_url="https://mirror/simple")
    result = invoke("run", "--matrix", path, "--executor", "ray", "--backend", backend, *sets)
    assert result.exit_code == 0, result.output
    options, = given
    assert options.ray.registry == registry
    assert (options.build_options and options.build_options.index_url) == index_url


def test_run_backend_venv_takes_the_matrix_build_settings_for_a_venv_it_builds(tmp_path, monkeypatch):
    import matrixbench.cli as cli
    from matrixbench.executors import create_environment

    given = []
    monkeypatch.setattr(cli, "run_matrix", lambda matrix, options, progress: given.append(options) or Summary())
    path = _with_build_settings(tmp_path, index_url="https://mirror/simple")
    result = invoke("run", "--matrix", path, "--backend", "venv", "--device", "cpu")
    assert result.exit_code == 0, result.output
    options, = given
    assert options.build_options.index_url == "https://mirror/simple"
    assert create_environment(options)._build_options is options.build_options


class Summary:
    def describe(self):
        return "done"


@pytest.mark.parametrize("args", [["--backend", "local"], ["--backend", "local", "--executor", "ray"],
                                  ["--backend", "docker"], ["--backend", "venv"]])
def test_run_refuses_a_build_setting_given_with_set_that_it_would_not_use(tmp_path, args):
    result = invoke("run", "--matrix", write_matrix(tmp_path), "--device", "cpu", "--results", tmp_path / "results",
                    "--set", "base_image=mirror/python:3.10", *args)
    assert result.exit_code == 2 and "--set base_image: a build setting this run does not use" in result.stderr
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


def test_report_margin_pct_reaches_the_report_checked_against_the_setting(tmp_path, monkeypatch):
    calls = []
    _fake_module(monkeypatch, "matrixbench.report",
                 build_report=lambda dirs, out, formats, prices, margin_pct: calls.append(margin_pct) or [])
    monkeypatch.chdir(tmp_path)
    assert invoke("report", tmp_path, "--margin-pct", "1.5").exit_code == 0 and calls == [1.5]
    assert invoke("report", tmp_path).exit_code == 0 and calls[-1] is None
    result = invoke("report", tmp_path, "--margin-pct", "0")
    assert result.exit_code == 2 and "--margin-pct" in result.stderr and "must be a number > 0" in result.stderr


def test_each_declared_conflict_names_options_of_run_and_is_refused_with_their_flags(tmp_path):
    from matrixbench.cli import RUN_CONFLICTS, run

    params = {param.name: param for param in run.params}
    for (first, second), why in RUN_CONFLICTS:
        values = [[params[name].opts[0]] + ([] if params[name].is_flag else [str(tmp_path / "x")])
                  for name in (first, second)]
        result = invoke("run", "--matrix", write_matrix(tmp_path), *values[0], *values[1])
        assert result.exit_code == 2 and f"{values[0][0]} and {values[1][0]} together: {why}" in result.stderr
