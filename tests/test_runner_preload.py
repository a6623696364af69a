"""The forkserver's preload (runner.worker, imported once; every cell's process is a fork of it) must not
import Inductor's codecache (its compile workers and cache state would be shared by every fork) nor touch
CUDA (a CUDA context does not survive fork; a forked child can use CUDA only if its parent never initialised
the driver). Checked in a fresh interpreter with torch.cuda's entry points recording every call: one
interpreter for both tests (torch and runner.worker take about 5 s of CPU to import, issue 35), each test
reading the calls it watches."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what the codecache test watches, and what the never-asks-CUDA test watches (torch._C's device count too)
TOUCHES = ("_lazy_init", "init", "is_available", "device_count", "get_device_properties", "get_device_name",
           "current_device", "set_device", "synchronize")
ASKS = ("is_available", "device_count", "init", "_lazy_init", "_cuda_getDeviceCount")
PROBE = """
import json, sys
import torch
calls = []
def spy(name, original):
    def wrapper(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)
    return wrapper
for name in %r:
    setattr(torch.cuda, name, spy(name, getattr(torch.cuda, name)))
if hasattr(torch._C, "_cuda_getDeviceCount"):
    torch._C._cuda_getDeviceCount = spy("_cuda_getDeviceCount", torch._C._cuda_getDeviceCount)
import runner.worker
print(json.dumps({"codecache": "torch._inductor.codecache" in sys.modules, "calls": calls,
                  "initialized": torch.cuda.is_initialized()}))
""" % (sorted(set(TOUCHES)),)


@pytest.fixture(scope="module")
def preload():
    """What importing runner.worker in a fresh interpreter did: the codecache imported or not, the torch.cuda
    calls (in order), CUDA initialised or not."""
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_preloaded_worker_neither_imports_the_codecache_nor_touches_cuda(preload):
    touched = [name for name in preload["calls"] if name in TOUCHES]
    assert {"codecache": preload["codecache"], "touched": touched, "initialized": preload["initialized"]} == \
        {"codecache": False, "touched": [], "initialized": False}


def test_the_forkserver_preload_never_asks_cuda_anything(preload):
    """A forked child can use CUDA only if its parent never initialised the driver (was test_runner_isolation's)."""
    asked = sorted({name for name in preload["calls"] if name in ASKS})
    assert (asked, preload["initialized"]) == ([], False)
