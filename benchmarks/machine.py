"""The machine a benchmark ran on, as ``lscpu`` says it: the fields that bear on timings."""
import json
import subprocess
import time

LSCPU_FIELDS = ("Model name", "CPU(s)", "Thread(s) per core", "Core(s) per socket", "Socket(s)",
                "Hypervisor vendor", "L2 cache", "L3 cache", "NUMA node(s)")


def lscpu():
    """A few lscpu fields ({} where lscpu is missing)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return {key: fields[key].strip() for key in LSCPU_FIELDS if key in fields}


def describe(fields):
    """One line for a result's Markdown: "Machine (lscpu): Model name: ...; CPU(s): 2; ..."."""
    return "Machine (lscpu): " + "; ".join(f"{key}: {value}" for key, value in fields.items()) + "."


def contention():
    """How much the CPU was contended, beyond the load average: Linux's CPU pressure (the share of
    time some runnable task waited for a CPU, %, over 10/60/300 s) and whether the scheduler
    groups tasks by session (autogroup: then another session's ``nice 19`` does not yield to this
    one, each session gets an equal share). {} where /proc lacks them."""
    out = {}
    try:
        some = open("/proc/pressure/cpu").readline().split()[1:4]
        out["cpu_pressure_some_pct"] = {k: float(v) for k, v in (item.split("=") for item in some)}
    except (OSError, ValueError, IndexError):
        pass
    try:
        out["sched_autogroup"] = open("/proc/sys/kernel/sched_autogroup_enabled").read().strip() == "1"
    except OSError:
        pass
    return out


def describe_contention(found):
    """"CPU pressure 84% (60 s), autogroup on" from contention(), or "unknown"."""
    parts = []
    if "cpu_pressure_some_pct" in found:
        parts.append(f"CPU pressure {found['cpu_pressure_some_pct']['avg60']:.0f}% (60 s)")
    if "sched_autogroup" in found:
        parts.append(f"autogroup {'on' if found['sched_autogroup'] else 'off'}")
    return ", ".join(parts) or "unknown"


class _NullEvent:
    """A CUDA event that records nothing and measures 0 ms: what a loop costs without the GPU."""

    def __init__(self, enable_timing=False):
        pass

    def record(self):
        pass

    def elapsed_time(self, other):
        return 0.0


class NullCuda:
    """Stands in for ``torch.cuda`` in a null-step loop (events and synchronize cost nothing), so that a
    benchmark measures the timing loop's own Python on a machine without a GPU."""

    Event = _NullEvent

    @staticmethod
    def synchronize():
        pass


def write_summary(path, lines):
    """Write a benchmark's Markdown summary and print it."""
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def write_results(out, name, result, markdown, *, load, started):
    """A benchmark's results with the machine it ran on, its load before (``load``), the contention over it and
    its seconds since ``started`` (time.monotonic): ``<name>.json`` and ``<name>.md`` (``markdown(result)``) in
    ``out``; the Markdown printed too."""
    result.update(machine=lscpu(), load_average=load, contention=contention(), seconds=time.monotonic() - started)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2, default=float) + "\n")
    text = markdown(result)
    (out / f"{name}.md").write_text(text)
    print(text)
