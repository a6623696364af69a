"""The forkserver's preload (runner.worker, imported once; every cell's process is a fork of it) must not
import Inductor's codecache (its compile workers and cache state would be shared by every fork) nor touch
CUDA (a CUDA context does not survive fork). Checked in a fresh interpreter with torch.cuda's entry
points recording every call."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import json, sys
import torch
touched = []
for name in ("_lazy_init", "init", "is_available", "device_count", "get_device_properties", "get_device_name",
             "current_device", "set_device", "synchronize"):
    original = getattr(torch.cuda, name)
    def spy(*args, _name=name, _original=original, **kwargs):
        touched.append(_name)
        return _original(*args, **kwargs)
    setattr(torch.cuda, name, spy)
import runner.worker
print(json.dumps({"codecache": "torch._inductor.codecache" in sys.modules, "touched": touched,
                  "initialized": torch.cuda.is_initialized()}))
"""


def test_the_preloaded_worker_neither_imports_the_codecache_nor_touches_cuda():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"codecache": False, "touched": [], "initialized": False}
