"""runner.selftest against the real GPU's selftest outputs (tests/data/gpu/h100-2026-11-26, issue 30):
a fake GPU calibrated to each logged run (its SM clock, the warmed matmul rate of the evidence's README,
the first matmul's set-up and the cold clock ramp that reproduce the logged means) fails the
selftest of commit 9ba6d4c exactly where the real one failed, and passes the present one."""
import json
import re
from pathlib import Path

import pytest

import selftest_9ba6d4c as before
from runner import selftest
from runner.selftest import MATMUL_N, Apparatus, run_selftest
from selftest_fakes import FakeCpuMachine, FakeCuda, FakeNvml

EVIDENCE = Path(__file__).parent / "data" / "gpu" / "h100-2026-11-26"
LOGS = {"first machine": EVIDENCE / "selftest.log", "cold": EVIDENCE / "second" / "st1.log",
        "warm": EVIDENCE / "second" / "st2.log"}


def parse_log(path):
    """A selftest log as printed: the GPU's name, each check's status, and its numbers."""
    lines = path.read_text(encoding="utf-8").splitlines()
    gpu = re.match(r"selftest on (.+): (PASS|FAIL)", lines[0]).group(1)
    statuses = dict((m.group(2), m.group(1).strip().lower()) for m in
                    (re.match(r"\s+\[(\w+)\s*\] ([^:]+):", line) for line in lines[1:]) if m)
    text = "\n".join(lines)
    sleep = re.search(r"cycles at (\d+) MHz should take ([\d.]+) ms; the timed loop measured ([\d.]+) ms", text)
    matmul = re.search(r"matmul: ([\d.]+) ms", text)
    pair = re.search(r"one pair around (\d+) calls ([\d.]+) ms", text)
    return {"gpu": gpu, "statuses": statuses, "mhz": float(sleep.group(1)), "expected_ms": float(sleep.group(2)),
            "sleep_mean_ms": float(sleep.group(3)), "matmul_mean_ms": float(matmul.group(1)),
            "iterations": int(pair.group(1)), "one_pair_ms": float(pair.group(2))}


def warmed_tflops():
    """The warmed rate the evidence's README gives for this card (a bf16 loop: the fake's matmul rate)."""
    text = (EVIDENCE / "README.md").read_text(encoding="utf-8")
    return float(re.search(r"~(\d+) TFLOP/s in a warmed", text).group(1))


def old_first_sleep_mean(idle_mhz, ramp_s, log):
    cuda = FakeCuda(true_mhz=log["mhz"], idle_mhz=idle_mhz, ramp_s=ramp_s)
    loop = before.time_iterations(lambda: cuda._sleep(before.SLEEP_CYCLES), log["iterations"], "cuda", cuda=cuda,
                                  clock=cuda.wall_clock)
    return sum(loop.samples_ms) / len(loop.samples_ms)


def calibrated_gpu(log):
    """A fake GPU that behaves as the logged one: the logged SM clock; a matmul at the README's warmed
    rate whose first call costs what makes the logged 10-call mean; and, where the first sleep loop
    ran slower than the steady one (a cold GPU), a clock ramping over that loop from the idle clock
    that reproduces its logged mean (found by bisection)."""
    tflops = warmed_tflops()
    calls = max(log["iterations"] // 5, 5)
    steady_ms = 2 * MATMUL_N ** 3 / (tflops * 1e12) * 1e3
    setup_ms = calls * (log["matmul_mean_ms"] - steady_ms)
    ramp_s, idle = 0.0, None
    if log["sleep_mean_ms"] > log["one_pair_ms"] * 1.01:   # the first loop ran while the clocks ramped
        ramp_s = log["iterations"] * log["sleep_mean_ms"] / 1e3
        low, high = 1.0, log["mhz"]
        for _ in range(60):
            idle = (low + high) / 2
            if old_first_sleep_mean(idle, ramp_s, log) > log["sleep_mean_ms"]:
                low = idle
            else:
                high = idle
    cuda = FakeCuda(true_mhz=log["mhz"], tflops=tflops, matmul_setup_ms=setup_ms, ramp_s=ramp_s, idle_mhz=idle)
    return cuda, {"tflops": tflops, "setup_ms": setup_ms, "ramp_s": ramp_s, "idle_mhz": idle}


def apparatus(cuda, module, name):
    return module.Apparatus("cuda", cuda=cuda, nvml=FakeNvml(cuda), gpu_name=name,
                            matmul_step=lambda: cuda.matmul(MATMUL_N), clock=cuda.wall_clock)


@pytest.mark.parametrize("which", sorted(LOGS))
def test_a_gpu_behaving_as_the_logged_h100_fails_the_old_selftest_as_logged_and_passes_the_new(which):
    log = parse_log(LOGS[which])
    cuda, calibration = calibrated_gpu(log)
    old = before.run_selftest(apparatus(cuda, before, log["gpu"]))
    old_statuses = {check["name"]: check["status"] for check in old["checks"]}
    assert old_statuses == log["statuses"], (which, calibration, before.describe(old))
    assert not old["passed"]
    cuda, _ = calibrated_gpu(log)
    new = run_selftest(apparatus(cuda, selftest, log["gpu"]))
    assert new["passed"], selftest.describe(new)
    assert all(check["status"] == "pass" for check in new["checks"]), selftest.describe(new)
    assert new["warmup"]["sm_clock_steady"] is True
    numbers = {check["name"]: check["numbers"] for check in new["checks"]}
    # the warmed matmul is measured at the rate the fake runs it, set-up excluded
    assert numbers["matmul vs peak"]["tflops"] == pytest.approx(calibration["tflops"], rel=0.01)


def test_the_cold_log_needs_a_clock_ramp_and_the_warm_one_none():
    """The calibration is what the logs say: the cold run's first loop ran slower than its steady one."""
    assert calibrated_gpu(parse_log(LOGS["cold"]))[1]["ramp_s"] > 0
    assert calibrated_gpu(parse_log(LOGS["warm"]))[1]["ramp_s"] == 0


def test_the_logged_json_is_the_logged_text():
    """selftest1.json (the cold run's result file) says what st1.log printed: the fixture is one run."""
    result = json.loads((EVIDENCE / "second" / "selftest1.json").read_text(encoding="utf-8"))
    log = parse_log(LOGS["cold"])
    assert {c["name"]: c["status"] for c in result["checks"]} == log["statuses"]
    assert round(result["checks"][0]["numbers"]["mean_ms"], 3) == log["sleep_mean_ms"]


@pytest.mark.parametrize("ramp_s", [5.0, 12.0])
def test_warm_up_lasts_until_nvmls_clock_is_steady_not_only_the_minimum_time(ramp_s):
    log = parse_log(LOGS["cold"])
    cuda = FakeCuda(true_mhz=log["mhz"], idle_mhz=log["mhz"] / 2, ramp_s=ramp_s)
    old = before.run_selftest(apparatus(cuda, before, log["gpu"]))
    assert not old["passed"]
    cuda = FakeCuda(true_mhz=log["mhz"], idle_mhz=log["mhz"] / 2, ramp_s=ramp_s)
    new = run_selftest(apparatus(cuda, selftest, log["gpu"]))
    assert new["passed"], selftest.describe(new)
    assert ramp_s <= new["warmup"]["warmup_s"] < ramp_s + selftest.CLOCK_WINDOW_S + 0.5
    assert new["warmup"]["sm_clock_steady"] is True


def test_without_nvml_clock_the_warm_up_is_by_time_and_says_so():
    cuda = FakeCuda()
    result = run_selftest(Apparatus("cuda", cuda=cuda, nvml=None, gpu_name="NVIDIA H100 80GB HBM3",
                                    matmul_step=lambda: cuda.matmul(MATMUL_N), clock=cuda.wall_clock))
    assert result["warmup"]["sm_clock_steady"] is None
    assert selftest.WARMUP_MIN_S <= result["warmup"]["warmup_s"] < selftest.WARMUP_MIN_S + 0.5
    assert "warmed by time alone" in selftest.describe(result)


def test_a_failed_check_says_what_it_means_and_what_to_do():
    cuda = FakeCuda(tflops=2000.0)   # faster than the peak: the timer under-measures
    check = {c["name"]: c for c in run_selftest(apparatus(cuda, selftest, "NVIDIA H100 80GB HBM3"))["checks"]}
    assert check["matmul vs peak"]["status"] == "fail"
    assert "What it means:" in check["matmul vs peak"]["detail"] and "nvidia-smi" in check["matmul vs peak"]["detail"]
    assert "What it means" not in check["sleep kernel"]["detail"]


# --- the CPU part: a loaded machine is a warning, a broken timer a failure ------------------------

def cpu_result(module, machine):
    if module is before:
        return before.run_selftest(before.Apparatus("cpu", clock=machine.timer))
    return run_selftest(Apparatus("cpu", clock=machine.timer, cpu_clock=machine.cpu,
                                  reference_clock=machine.reference))


def test_a_loaded_machine_fails_the_old_cpu_part_and_is_a_warning_with_others_share_now():
    share = 0.4                                   # load 5 on 2 cores: this thread gets 2/5 of the time
    old = cpu_result(before, FakeCpuMachine(share=share))
    assert not old["passed"]
    new = cpu_result(selftest, FakeCpuMachine(share=share))
    known = {c["name"]: c for c in new["checks"]}["CPU known-duration step"]
    assert new["passed"] and known["status"] == "warning", selftest.describe(new)
    assert known["numbers"]["others_share"] == pytest.approx(1 - share, abs=0.05)
    assert f"{1 - share:.0%}" in known["detail"] and new["warnings"]


def test_an_idle_machine_passes_the_cpu_part_without_warnings():
    new = cpu_result(selftest, FakeCpuMachine(share=1.0))
    assert new["passed"] and all(c["status"] in ("pass", "skipped") for c in new["checks"]), selftest.describe(new)
    assert new["warnings"] == []


@pytest.mark.parametrize("timer_rate,share", [(0.5, 1.0), (2.0, 1.0), (0.5, 0.4), (1.5, 0.4)])
def test_a_broken_timer_still_fails_loaded_or_not(timer_rate, share):
    new = cpu_result(selftest, FakeCpuMachine(share=share, timer_rate=timer_rate))
    known = {c["name"]: c for c in new["checks"]}["CPU known-duration step"]
    assert not new["passed"] and known["status"] == "fail", selftest.describe(new)
    assert "What it means" in known["detail"]


def test_the_real_cpu_part_on_this_machine_passes_loaded_or_not():
    """This shared machine is often loaded: the timer is sound, so the CPU part passes (a warning at most)."""
    result = run_selftest(Apparatus("cpu"))
    assert result["passed"], selftest.describe(result)
