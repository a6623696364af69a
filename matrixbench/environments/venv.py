"""The venv backend: each image's cells run in a virtual environment built from its pins.

Where Docker is missing (HPC clusters, shared machines, laptops), this still compares torch
versions. ``prepare(images)`` makes sure each image has its complete venv
(matrixbench/build/venvs.py: built, or reused when its content hash matches); ``run(request)`` then
starts the runner exactly as the container's entrypoint does (``python -m runner --cells ...
--out ...``), with the venv's interpreter, the runner package alone on PYTHONPATH, the host allow-list
environment (no other host variable, no host PYTHONPATH), the host's GPUs
(CUDA_VISIBLE_DEVICES honoured) and the image's content hash as every record's image_id.
"""
import os
from pathlib import Path
from typing import Callable, Dict, List, Optional

from matrixbench.build.facts import BuildFacts
from matrixbench.build.images import BuildOptions, print_progress
from matrixbench.build.interpreters import Finder
from matrixbench.build.venvs import Venv, ensure_venv, link_runner, plan_venv, torch_matches, venvs_root
from matrixbench.environments.base import Backend, RunRequest
from matrixbench.environments.environment import compile_cache_env, runner_env
from matrixbench.environments.local import launch_runner, stop_running
from matrixbench.errors import RunError
from matrixbench.gpu import host_gpus
from matrixbench.matrix import Image


class VenvBackend(Backend):
    name = "venv"
    builds_images = True

    def __init__(self, *, root: Optional[Path] = None, finder: Optional[Finder] = None,
                 build_options: Optional[BuildOptions] = None) -> None:
        """``root``: where the venvs live (default venvs.venvs_root()); ``finder``: the
        interpreter search's seams (interpreters.Finder); ``build_options`` (images.BuildOptions, the
        matrix's build settings): the index and CA bundle a venv that is missing is built with."""
        self._root = root
        self._finder = finder
        self._build_options = build_options
        self._venvs: Dict[str, Venv] = {}

    def describe(self) -> str:
        return (f"venv backend: one virtual environment per image under {self._root or venvs_root()}, "
                "built from its pins (`matrixbench build --backend venv`)")

    def gpus_available(self) -> bool:
        return bool(host_gpus())

    def prepare(self, images: List[Image], emit: Optional[Callable[[str, str], None]] = None) -> None:
        with (self._build_options or BuildOptions()).spec_options() as given:
            for image in images:
                plan = plan_venv(image, root=self._root, ca_bundle=given["ca_bundle"], index_url=given["index_url"],
                                 extra_index_urls=given["extra_index_urls"])
                self._venvs[image.name] = ensure_venv(plan, emit=emit or print_progress, finder=self._finder)

    def build_facts(self, image: Image) -> Optional[BuildFacts]:
        venv = self._venvs.get(image.name)
        return venv.facts if venv is not None else None

    def run(self, request: RunRequest) -> int:
        venv = self._venvs.get(request.image.built_as)
        if venv is None:
            raise RunError(f"image {request.image.name!r}: no venv prepared for it (VenvBackend.prepare)")
        if request.image.torch and not torch_matches(request.image.torch, venv.torch):
            raise RunError(f"image {request.image.name!r}: the venv {venv.path} has torch {venv.torch}, "
                           f"but the matrix asks for {request.image.torch}")
        env = runner_env(os.environ, request, compile_cache_env(request.paths.cache_dir), venv=venv.path,
                         runner_path=link_runner(venv.path))
        return int(launch_runner(venv.python_bin, request, env, image_id=venv.image_id))

    def stop_all(self) -> None:
        stop_running()
