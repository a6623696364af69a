"""The runner's environment, shared by the environments: compile-cache variables (all of them), the
host allow-list (those whose runner is a host process: local and venv) and the run-time secrets: the
one home of each (their redaction is matrixbench.redact's).

The runner never gets a copy of ``os.environ``: only ENV_ALLOWED, the ENV_ALLOWED_PREFIXES
families, the image's ``env`` and the run-time secrets (RUNTIME_SECRETS: HF_TOKEN) reach it. A secret's
value never reaches a log line, an error message or a record: ``redact.redact_text`` replaces it by ``***``.
"""
import os
from pathlib import Path
from typing import Dict, Mapping, Optional, Union

from matrixbench import resources
from matrixbench.environments.base import RunRequest
from matrixbench.errors import RunError

# Passed through from the caller's environment; nothing else is.
ENV_ALLOWED = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
    "PYTHONPATH", "LD_LIBRARY_PATH", "CC", "CXX",
    "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "NVIDIA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_ENDPOINT", "TRANSFORMERS_OFFLINE",
)
ENV_ALLOWED_PREFIXES = ("TORCH_", "TORCHINDUCTOR_", "TRITON_")
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
# Passed to the runner at run time only (never baked into an image, never shipped in a Ray task's args).
RUNTIME_SECRETS = ("HF_TOKEN",)


def runtime_secrets(environ: Mapping[str, str]) -> Dict[str, str]:
    """The run-time secrets ``environ`` holds (HF_TOKEN), for the runner's environment."""
    return {key: environ[key] for key in RUNTIME_SECRETS if environ.get(key)}


def runner_parent() -> Path:
    """The folder the runner package is imported from: the local backend's PYTHONPATH (a checkout
    or site-packages)."""
    return resources.runner_dir(RunError).parent


def compile_cache_env(root: Optional[Union[str, Path]]) -> Dict[str, str]:
    """The Inductor/Triton cache variables under ``root`` (as the runner sees it), so a rerun
    compiles warm. No root (--cold) sets none: the runner compiles each cell in its own scratch
    folder."""
    if root is None:
        return {}
    return {"TORCHINDUCTOR_CACHE_DIR": f"{root}/inductor", "TRITON_CACHE_DIR": f"{root}/triton"}


def _allowed(key: str) -> bool:
    return (key in ENV_ALLOWED or key.startswith(ENV_ALLOWED_PREFIXES)) and key not in CACHE_VARIABLES


def runner_env(environ: Mapping[str, str], request: RunRequest, cache_env: Mapping[str, str],
               venv: Optional[Union[str, Path]] = None,
               runner_path: Optional[Union[str, Path]] = None) -> Dict[str, str]:
    """A host-process runner's environment: the allow-list, the request's env, caches, the runner
    on the path.

    ``runner_path`` (the folder holding the runner package; default runner_parent()) leads
    PYTHONPATH. With ``venv`` (its folder), the venv's bin/ leads PATH, VIRTUAL_ENV names it, and
    the host's PYTHONPATH is dropped: the venv's interpreter sees its own packages and the
    runner, nothing of the host's. Without GPUs asked for, none is visible; with them,
    CUDA_VISIBLE_DEVICES passes through as the host has it (or names the chosen GPUs).
    """
    env = {key: value for key, value in environ.items() if _allowed(key)}
    if venv is not None:
        env.pop("PYTHONPATH", None)
        env["PATH"] = os.pathsep.join(filter(None, [str(Path(venv) / "bin"), env.get("PATH")]))
        env["VIRTUAL_ENV"] = str(venv)
    if request.paths.hf_cache_dir is not None:
        env["HF_HOME"] = str(request.paths.hf_cache_dir)
    if not request.placement.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif request.placement.slot is not None and request.placement.slot.gpu_uuid:
        env["CUDA_VISIBLE_DEVICES"] = request.placement.slot.gpu_uuid
    elif request.placement.gpu_ids:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(request.placement.gpu_ids)
    env.update(cache_env)
    env.update(request.placement.slot_env())
    env.update(request.env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(runner_path or runner_parent()), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env
