"""The attention implementation asked for is the one run and the one recorded, in every transformers the
project uses: real venvs (those of tests/test_venv_attribution.py, cached under ~/.cache/matrixbench/venvs)
run tests/attention_probe.py, which builds tiny ViT with eager and with sdpa, counts the SDPA calls of a
real forward (the witness independent of config strings), lists the attention layer classes, loads the
model back through from_pretrained and runs a real cell for its record; and what every seed model says
it runs agrees with its forward's SDPA calls. transformers 4.43.4 on torch 2.13 (the bridge) used to run
SDPA when eager was asked for; 4.31 (the seed era) recorded "sdpa" running eager.
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

from matrixbench.matrix.attribution import bridge_name
from runner.registry import DEFAULT_MODELS
from venv_helpers import venv_fixtures

# In the venv group, last (the attribution test's group builds the seed-era venv and the bridge meanwhile: this
# test then finds them built, waiting for their build's turn where it is still under way), so that the two venv
# groups end about together (docs/test-suite-time.md).
pytestmark = [pytest.mark.venv, pytest.mark.last_in_group]

REPO = Path(__file__).resolve().parents[1]
MATRIX_PATH = REPO / "tests" / "data" / "venv-attribution-matrix.yaml"
BUILD_LOG = REPO / ".ci" / "cache" / "venv-attention-build.log"
BRIDGE = bridge_name("venv-latest", "venv-stable")
# What sdpa turns out as, by the versions' own facts: 4.31 has no implementation but eager; 4.43.4 has no
# SDPA path on torch < 2.1.1; 4.43.4 on torch 2.13 and 5.23.0 have ViT's.
SDPA_RUNS = {"venv-seed": "eager", "venv-stable": "eager", BRIDGE: "sdpa", "venv-latest": "sdpa"}

matrix, built = venv_fixtures(MATRIX_PATH, BUILD_LOG)


def probe(venv, model, *attentions):
    argv = [str(venv.path / "bin" / "python"), str(REPO / "tests" / "attention_probe.py"), model, *attentions]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize("image", list(SDPA_RUNS))
def test_vit_runs_and_records_the_attention_asked_for(built, image):
    venv = built[image]
    assert venv is not None, f"the {image} venv did not build"
    eager, sdpa = probe(venv, "vit", "eager", "sdpa")
    assert (eager["used"], eager["sdpa_calls"]) == ("eager", 0), eager
    assert not any("Sdpa" in name for name in eager["layers"]), eager
    assert eager["record"] == {"status": "ok", "attention": {"requested": "eager", "used": "eager"}}, eager
    assert eager["pretrained"] == {"used": "eager", "sdpa_calls": 0}, eager   # through from_pretrained
    assert sdpa["used"] == SDPA_RUNS[image], sdpa
    assert (sdpa["sdpa_calls"] > 0) == (sdpa["used"] == "sdpa"), sdpa   # what ran is what is said
    if sdpa["transformers"].startswith("4.43."):   # 4.4x builds a layer class per implementation
        assert ("ViTSdpaSelfAttention" in sdpa["layers"]) == (sdpa["used"] == "sdpa"), sdpa
    assert sdpa["record"] == {"status": "ok", "attention": {"requested": "sdpa", "used": SDPA_RUNS[image]}}, sdpa
    assert sdpa["pretrained"]["used"] == SDPA_RUNS[image], sdpa
    assert (sdpa["pretrained"]["sdpa_calls"] > 0) == (SDPA_RUNS[image] == "sdpa"), sdpa


@pytest.mark.parametrize("image", list(SDPA_RUNS))
def test_every_seed_model_says_what_its_forward_runs(built, image):
    venv = built[image]
    assert venv is not None, f"the {image} venv did not build"
    found = probe(venv, "--every-seed-model", "eager", "sdpa")
    assert [line["model"] for line in found[::2]] == list(DEFAULT_MODELS), found
    for line in found:
        assert ("sdpa" in line["used"].split("+")) == (line["sdpa_calls"] > 0), line
        if line["requested"] == "eager":
            assert line["used"] == "eager", line
