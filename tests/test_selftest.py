"""runner.selftest: its GPU branches against a fake GPU of known truth (tests/selftest_fakes.py), its
CPU part for real and on a fake clock."""
import pytest

from runner import selftest
from runner.selftest import GPU_CHECKS, MATMUL_N, Apparatus, run_selftest
from selftest_fakes import FakeCpuMachine, FakeCuda, FakeNvml

H100 = "NVIDIA H100 80GB HBM3"


def gpu(cuda=None, nvml="default", name=H100):
    cuda = cuda or FakeCuda()
    nvml = FakeNvml(cuda) if nvml == "default" else nvml
    return Apparatus("cuda", cuda=cuda, nvml=nvml, gpu_name=name, matmul_step=lambda: cuda.matmul(MATMUL_N),
                     clock=cuda.wall_clock)


def by_name(result):
    return {check["name"]: check for check in result["checks"]}


def test_a_sound_apparatus_passes_every_check_with_its_numbers():
    result = run_selftest(gpu())
    checks = by_name(result)
    assert result["passed"] and set(checks) == set(GPU_CHECKS), selftest.describe(result)
    assert checks["sleep kernel"]["numbers"]["sm_clock_mhz"] == 1980.0
    assert 0.95 < checks["sleep kernel"]["numbers"]["mean_ms"] / checks["sleep kernel"]["numbers"]["expected_ms"] < 1.05
    assert checks["CUDA-graph replay"]["numbers"]["replays_counted"] == 50
    assert 0.25 < checks["matmul vs peak"]["numbers"]["share"] < 1.0
    assert result["skipped"] == []


def test_events_that_under_measure_fail_the_sleep_and_wall_clock_checks():
    checks = by_name(run_selftest(gpu(FakeCuda(event_scale=0.5))))
    assert checks["sleep kernel"]["status"] == "fail" and "0.500x" in checks["sleep kernel"]["detail"]
    assert checks["wall clock"]["status"] == "fail"


def test_a_gpu_running_slower_than_nvml_says_fails_the_sleep_check():
    cuda = FakeCuda(true_mhz=1500.0)
    checks = by_name(run_selftest(gpu(cuda, nvml=FakeNvml(cuda, reported_mhz=1980.0))))   # NVML says 1980 MHz
    assert checks["sleep kernel"]["status"] == "fail"


def test_a_matmul_faster_than_the_peak_means_the_timer_under_measures():
    checks = by_name(run_selftest(gpu(FakeCuda(tflops=2000.0))))
    assert checks["matmul vs peak"]["status"] == "fail" and "under-measures" in checks["matmul vs peak"]["detail"]


def test_uncounted_replays_fail_the_graph_check():
    cuda = FakeCuda()
    counted = cuda.CUDAGraph

    class Uncounted(counted):   # replays bound per instance: the class-level hook never sees them
        def __init__(self):
            super().__init__()
            self.replay = lambda: [op() for op in self.ops]
    cuda.CUDAGraph = Uncounted
    checks = by_name(run_selftest(gpu(cuda)))
    assert checks["CUDA-graph replay"]["status"] == "fail"
    assert checks["CUDA-graph replay"]["numbers"]["replays_counted"] == 0


def test_without_nvml_the_sleep_check_is_skipped_and_nvml_fails():
    result = run_selftest(gpu(nvml=None))
    checks = by_name(result)
    assert checks["sleep kernel"]["status"] == "skipped" and checks["NVML counters"]["status"] == "fail"
    assert not result["passed"] and "sleep kernel: NVML gives no SM clock" in result["skipped"][0]


def test_an_energy_counter_that_does_not_move_fails():
    cuda = FakeCuda()
    nvml = FakeNvml(cuda)
    nvml.energy_mj = lambda: 5
    assert by_name(run_selftest(gpu(cuda, nvml=nvml)))["NVML counters"]["status"] == "fail"


def test_an_unknown_gpu_skips_the_peak_check():
    checks = by_name(run_selftest(gpu(name="NVIDIA Future GPU")))
    assert checks["matmul vs peak"]["status"] == "skipped"


def test_the_cpu_part_on_a_fake_clock_passes_and_names_what_it_skipped():
    machine = FakeCpuMachine()   # each reading of a clock takes 10 us of this thread's CPU time, no load
    result = run_selftest(Apparatus("cpu", clock=machine.timer, cpu_clock=machine.cpu,
                                    reference_clock=machine.reference))
    checks = by_name(result)
    assert result["passed"] and checks["CPU known-duration step"]["status"] == "pass"
    assert {line.split(":")[0] for line in result["skipped"]} == set(GPU_CHECKS)


def test_the_cpu_part_runs_for_real_and_writes_its_result(tmp_path):
    """Real clocks, real loop: a loaded machine is a warning, not a failure, so it passes."""
    out = tmp_path / "selftest.json"
    code = selftest.main(["--out", str(out), "--device", "cpu"])
    import json

    result = json.loads(out.read_text())
    assert code == 0 and result["passed"]
    assert result["device"] == "cpu" and len(result["skipped"]) == len(GPU_CHECKS)
    assert all(check["numbers"] for check in result["checks"] if check["status"] != "skipped")


# --- matrixbench selftest / doctor --measure (host side) --------------------------------------

def fake_python(tmp_path, passed):
    """An 'interpreter' that writes a GPU selftest result to --out, as runner.selftest would."""
    import json

    result = {"device": "cuda", "gpu_name": H100, "passed": passed, "skipped": [],
              "checks": [{"name": "sleep kernel", "status": "pass" if passed else "fail",
                          "detail": "10000000 cycles ...", "numbers": {"mean_ms": 5.05}}]}
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\n[ \"$1\" = -c ] && exit 0  # import torch: fine\n"
                      "while [ \"$1\" != --out ]; do shift; done\n"
                      f"printf '%s' '{json.dumps(result)}' > \"$2\"\necho 'selftest on {H100}: ...'\n")
    script.chmod(0o755)
    return str(script)


def test_the_command_keeps_the_result_in_the_run_folder_and_exits_8_on_a_failure(tmp_path):
    from click.testing import CliRunner

    from matrixbench.cli import main

    ok = CliRunner().invoke(main, ["selftest", "--results", str(tmp_path / "r"), "--run", "one",
                                   "--python", fake_python(tmp_path, True)])
    assert ok.exit_code == 0 and f"selftest on {H100}" in ok.output
    assert (tmp_path / "r" / "one" / "selftest.json").is_file()
    bad = CliRunner().invoke(main, ["selftest", "--results", str(tmp_path / "r"), "--run", "two",
                                    "--python", fake_python(tmp_path, False)])
    assert bad.exit_code == 10 and "sleep kernel" in bad.output and "selftest.json" in bad.output


def test_the_command_runs_the_cpu_part_here(tmp_path):
    import json

    from click.testing import CliRunner

    from matrixbench.cli import main

    result = CliRunner().invoke(main, ["selftest", "--results", str(tmp_path), "--run", "cpu", "--device", "cpu"])
    assert result.exit_code == 0, result.output   # load may stretch the busy wait: a warning, not a failure
    written = json.loads((tmp_path / "cpu" / "selftest.json").read_text())
    assert written["device"] == "cpu" and len(written["skipped"]) == len(GPU_CHECKS)


def test_doctor_measure_runs_the_selftest_after_the_checklist(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from matrixbench import doctor, host_noise
    from matrixbench.cli import main

    monkeypatch.setattr(doctor, "diagnose", lambda matrix, backend: [doctor.Check("driver and GPUs", "ok", "fine")])
    monkeypatch.setattr(host_noise, "CPU_LOOP_S", 0.2)   # 12 s in real use
    monkeypatch.setattr(host_noise, "PROBE_S", 0.5)      # the probe: this fake interpreter answers no probe
    result = CliRunner().invoke(main, ["doctor", "--measure", "--results", str(tmp_path), "--run", "m",
                                       "--python", fake_python(tmp_path, True)])
    assert result.exit_code == 0 and "[ ok ] driver and GPUs" in result.output and "selftest on" in result.output
    assert "host noise (0 s" in result.output and "processes a side resolves about" in result.output
    assert "noise probe (a small launch-bound model in the runner's interpreter): not measured" in result.output
    assert (tmp_path / "m" / "selftest.json").is_file()


def test_doctor_measure_says_the_selftest_did_not_run_when_a_check_failed(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from matrixbench import doctor
    from matrixbench.cli import main

    monkeypatch.setattr(doctor, "diagnose", lambda matrix, backend: [doctor.Check("docker", "fail", "no daemon")])
    result = CliRunner().invoke(main, ["doctor", "--measure", "--results", str(tmp_path), "--run", "m",
                                       "--python", fake_python(tmp_path, True)])
    assert result.exit_code == 7 and "[FAIL] docker" in result.stderr, result.output
    assert result.stderr.rstrip().endswith(
        "selftest not run: fix the failures above first (or run `matrixbench selftest`)")
    assert "selftest on" not in result.output and not (tmp_path / "m").exists()
    plain = CliRunner().invoke(main, ["doctor"])   # without --measure: no word of the selftest
    assert plain.exit_code == 7 and "selftest" not in plain.output


def test_an_interpreter_without_torch_is_skipped_not_failed(tmp_path):
    from matrixbench.selftest import run_selftest as host_selftest

    script = tmp_path / "python"
    script.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named torch' >&2\nexit 1\n")
    script.chmod(0o755)
    lines = []
    assert host_selftest(tmp_path / "run", python=str(script), emit=lines.append) is None
    assert "has no torch" in lines[0] and not (tmp_path / "run" / "selftest.json").exists()


def test_the_report_shows_each_runs_selftest_with_its_numbers(tmp_path):
    import json

    from matrixbench.report.selftest_notes import selftest_notes

    (tmp_path / "gpu-run").mkdir()
    (tmp_path / "gpu-run" / "selftest.json").write_text(json.dumps(run_selftest(gpu())))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "selftest.json").write_text("{not json")
    notes, problems = selftest_notes([tmp_path])
    assert notes[0].startswith(f"Selftest of the measuring apparatus (gpu-run, {H100}) passed: sleep kernel pass: ")
    assert "CUDA-graph replay pass: 50 of 50 replays counted" in notes[0]
    assert len(problems) == 1 and "broken/selftest.json" in problems[0] and "not valid JSON" in problems[0]


def dying_python(tmp_path, writes_passed):
    """An 'interpreter' whose selftest child dies (SIGKILL'd: exit 137), optionally after writing a passed result."""
    import json

    result = {"device": "cuda", "gpu_name": H100, "passed": True, "skipped": [],
              "checks": [{"name": "sleep kernel", "status": "pass", "detail": "...", "numbers": {}}]}
    write = f"printf '%s' '{json.dumps(result)}' > \"$2\"\n" if writes_passed else ""
    script = tmp_path / "python-dies"
    script.write_text("#!/bin/sh\n[ \"$1\" = -c ] && exit 0\n"
                      f"while [ \"$1\" != --out ]; do shift; done\n{write}kill -9 $$\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize("writes_passed", [False, True])
def test_a_selftest_whose_child_dies_never_reports_passed(tmp_path, writes_passed):
    """Issue 33: an older selftest.json (passed) was read as the outcome of a child that died."""
    import json

    from click.testing import CliRunner

    from matrixbench.cli import main

    ok = CliRunner().invoke(main, ["selftest", "--results", str(tmp_path / "r"), "--run", "one",
                                   "--python", fake_python(tmp_path, True)])
    assert ok.exit_code == 0
    older = json.loads((tmp_path / "r" / "one" / "selftest.json").read_text())
    assert older["passed"] and older["run"] == "one" and older["started_at"] and older["exit_code"] == 0
    died = CliRunner().invoke(main, ["selftest", "--results", str(tmp_path / "r"), "--run", "one",
                                     "--python", dying_python(tmp_path, writes_passed)])
    assert died.exit_code == 10, died.output
    assert "passed" not in died.output.lower() or "not" in died.output.lower()
    written = json.loads((tmp_path / "r" / "one" / "selftest.json").read_text())
    assert written["passed"] is False and written["attempt"] != older["attempt"]
    assert written["started_at"] >= older["started_at"] and written["exit_code"] in (-9, 137)
    assert not [p for p in (tmp_path / "r" / "one").iterdir() if p.name.startswith(".selftest.")]
