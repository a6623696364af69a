"""The machine a benchmark ran on, as ``lscpu`` says it: the fields that bear on timings."""
import subprocess

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
