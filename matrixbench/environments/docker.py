"""The docker backend: one container per image runs `python -m runner` on that image's cells.

Mounted into the container: the image's results folder (/results, holding the cells file the
runner reads and the records it writes), the host's HF cache (/hf-home, as HF_HOME) and the
image's compile-cache folder (/compile-cache: Inductor and Triton caches), a runner in turns' shared
baton folder (/turns: the partner's container mounts the same host folder), and read-only the
folder of each model given by a local config or checkpoint (/models/<model>; the cell's
config_path is rewritten to it). The container runs
as the host user's uid:gid, so records on the host belong to that user. Its log goes to
<out_dir>/runner.log, as with the local backend.
"""
import dataclasses
import os
import re
import uuid
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from matrixbench.build import docker_client
from matrixbench.build import facts as build_facts
from matrixbench.build.docker_client import Container, DockerClient, ImageInfo
from matrixbench.build.images import image_tag
from matrixbench.build.versions import torch_label
from matrixbench.environments.base import Backend, RunRequest
from matrixbench.environments.environment import compile_cache_env
from matrixbench.errors import RunError
from matrixbench.matrix import Image
from matrixbench.redact import redact_text, secrets
from matrixbench.run.layout import CALIBRATION_RUN_DEPTH, CELLS_FILENAME, LEASE_PATTERN, LOG_FILENAME, lease_path
from matrixbench.run.owner import Lease, Owner, holding_lease, judge, sweep_leases, this_process
from matrixbench.run.runner_input import write_cells_file
from runner.core import Cell

RESULTS_MOUNT = "/results"
HF_MOUNT = "/hf-home"
COMPILE_CACHE_MOUNT = "/compile-cache"
MODELS_MOUNT = "/models"
TIMING_BOARD_MOUNT = "/timing-board"   # the run's timing board (runner.timing_board), slots only
TURNS_MOUNT = "/turns"   # the batons a runner in turns shares with its partner's (Work.turns), turns only


class DockerBackend(Backend):
    """Runs each image's cells in a fresh container of its `matrixbench build` image."""

    name = "docker"
    builds_images = True

    def __init__(self, *, client: Optional[DockerClient] = None, run_id: Optional[str] = None,
                 on_log: Optional[Callable[[str, str], None]] = None, user: Optional[str] = None) -> None:
        """``client``: a docker_client.DockerClient (connects on first use when None).
        ``run_id`` labels the containers (default: the name of out_dir's parent, results/<run>).
        ``on_log(image_name, line)`` also gets the container's log lines (they always go to
        <out_dir>/runner.log). ``user`` is "uid:gid" (default: the current user's)."""
        self._client = client
        self._run_id = run_id
        self._on_log = on_log
        self._user = user or f"{os.getuid()}:{os.getgid()}"
        self._gpus: Optional[List[str]] = None   # nvidia-smi -L lines from a throwaway container, once per run
        self._running: Set[Container] = set()   # containers being followed (slots: several threads)

    def describe(self) -> str:
        return f"docker backend: one container per image ({image_tag('<image>')}, built by `matrixbench build`)"

    def gpus_available(self) -> bool:
        """Whether a throwaway container that asks for GPUs sees any (asked once per run)."""
        return bool(self.container_gpus())

    def container_gpus(self) -> List[str]:
        """``nvidia-smi -L`` lines seen from a container of a built matrixbench image; [] when
        Docker cannot give GPUs or no image is built yet (nothing to run then anyway)."""
        if self._gpus is None:
            client = self._connected()
            images = sorted(client.find_images({docker_client.LABEL_MARK: None}))
            self._gpus = list(client.gpu_probe(images[0])) if images else []
        return self._gpus

    def build_facts(self, image: Image) -> Optional[build_facts.BuildFacts]:
        info = self._connected().inspect_image(image_tag(image.name))
        return build_facts.from_labels(info.labels) if info is not None else None

    def run(self, request: RunRequest) -> int:
        client = self._connected()
        image = self._image(client, request)   # GPUs: checked once, by run/command.py, before any image runs
        models = model_mounts(request.work.cells)
        request.work_dir().mkdir(parents=True, exist_ok=True)
        cells_file = write_cells_file(request, image.id, path=request.work_dir() / CELLS_FILENAME,
                                      cells=[in_container(cell, models) for cell in request.work.cells],
                                      turns_folder=TURNS_MOUNT)
        slot = request.placement.slot
        argv = runner_argv(cells_file.relative_to(request.paths.out_dir)) + request.work.mode_argv()
        name = self._container_name(request)
        with holding_lease(lease_path(request.work_dir(), name)) as lease:   # held until the container is removed
            container = client.start_container(
                image_tag(request.image.built_as), argv,
                user=self._user, env=container_env(request), mounts={**mounts(request), **models},
                labels={**self._labels(request, image), **lease.labels()}, gpus=request.placement.gpus,
                gpu_ids=(slot.gpu_uuid,) if slot is not None and slot.gpu_uuid else request.placement.gpu_ids,
                name=name,
                cpuset_cpus=slot.cpuset if slot is not None else None,
                cpuset_mems=str(slot.numa_node) if slot is not None and slot.numa_node is not None else None,
            )
            self._running.add(container)
            try:
                return self._follow(container, request)
            finally:
                self._running.discard(container)

    def stop_all(self) -> None:
        for container in list(self._running):
            container.stop(timeout=5)

    def stop_leftovers(self, run_path: Path) -> List[str]:
        """Stop and remove the containers of ``run_path`` whose owning host process is gone (a killed run's: its
        pid, or where it ran in another PID namespace of this machine, its lease says so); a container whose owner
        lives, or ran on another machine, is left alone. Then the lease files under ``run_path`` that no process
        holds and no container left there names go (a killed run's, whose container was removed by hand)."""
        labels = {docker_client.LABEL_RUN_DIR: str(Path(run_path).resolve())}
        lines = self._stop_leftovers(labels)
        named = {lease.path.resolve() for container in self._connected().find_containers(
                     {docker_client.LABEL_MARK: None, **labels})
                 if (lease := Lease.from_labels(container.labels)) is not None}
        swept = sweep_leases(Path(run_path), LEASE_PATTERN, keep=named)
        if swept:
            lines.append(f"removed {len(swept)} lease file(s) of a killed run whose containers were removed "
                         f"by hand: {', '.join(str(path.relative_to(run_path)) for path in swept)}")
        return lines

    def stop_run_leftovers(self, run_id: str) -> List[str]:
        """A Ray node's: the containers labelled with the run's name (``run_id``) whose owner is gone; only what it
        stopped, and what it left not knowing whether its owner runs, is said (the containers of the run's other
        units, running now, are no news)."""
        return self._stop_leftovers({docker_client.LABEL_RUN_ID: run_id}, news_only=True)

    def _stop_leftovers(self, labels: Dict[str, str], news_only: bool = False) -> List[str]:
        here = this_process()
        selector: Dict[str, Optional[str]] = {docker_client.LABEL_MARK: None, **labels}
        said = [_stop_leftover(container, here) for container in self._connected().find_containers(selector)]
        return [line for alive, stopped, line in said if stopped or not news_only or alive is None]

    def _connected(self) -> DockerClient:
        if self._client is None:
            self._client = docker_client.connect()
        return self._client

    def _image(self, client: DockerClient, request: RunRequest) -> ImageInfo:
        tag = image_tag(request.image.built_as)
        image: Optional[ImageInfo] = client.inspect_image(tag)
        if image is None:
            raise RunError(
                f"image {request.image.name!r}: Docker has no {tag}; build it first with "
                f"`matrixbench build --images {request.image.name}`"
            )
        built_torch = image.labels.get(docker_client.LABEL_TORCH)
        if request.image.torch and built_torch and built_torch != torch_label(request.image.torch):
            raise RunError(
                f"image {request.image.name!r}: {tag} was built with torch {built_torch}, but the "
                f"matrix asks for {request.image.torch}; rebuild it with "
                f"`matrixbench build --images {request.image.name}`"
            )
        _refuse_stale(image, tag, request)
        return image

    def _follow(self, container: Container, request: RunRequest) -> int:
        """Stream logs until the container exits; stop and remove it whatever happens."""
        hide = secrets(request.env)
        try:
            with open(request.work_dir() / LOG_FILENAME, "a") as log:
                for line in container.log_lines():
                    line = redact_text(line, hide)
                    log.write(line + "\n")
                    log.flush()
                    if self._on_log:
                        self._on_log(request.image.name, line)
            exit_code: int = container.wait()
        except KeyboardInterrupt:
            container.stop(timeout=5)
            raise
        finally:
            container.remove()
        return exit_code

    def _labels(self, request: RunRequest, image: ImageInfo) -> Dict[str, str]:
        return {
            docker_client.LABEL_MARK: "1",
            docker_client.LABEL_RUN_ID: self._run_id_for(request),
            docker_client.LABEL_RUN_DIR: str(run_folder_of(request)),
            docker_client.LABEL_IMAGE: request.image.name,
            docker_client.LABEL_TORCH: image.labels.get(docker_client.LABEL_TORCH, "unknown"),
            **this_process().labels(),
        }

    def _run_id_for(self, request: RunRequest) -> str:
        """The run's name (its folder's, unless run_id was given)."""
        return self._run_id or run_folder_of(request).name

    def _container_name(self, request: RunRequest) -> str:
        raw = f"matrixbench-{self._run_id_for(request)}-{request.image.name}-{uuid.uuid4().hex[:6]}"
        return re.sub(r"[^A-Za-z0-9_.-]", "-", raw)


def run_folder_of(request: RunRequest) -> Path:
    """The run folder: out_dir is results/<run>/<image> (a calibration's, more folders down)."""
    up = CALIBRATION_RUN_DEPTH - 1 if request.placement.calibration else 0
    return Path(request.paths.out_dir).resolve().parents[up]


def _stop_leftover(container: Container, here: Owner) -> Tuple[Optional[bool], bool, str]:
    """Stop and remove one container of the run unless its owner may still run (owner.judge: by its pid, else by
    its lease); (whether its owner runs (None: cannot be told), whether this call stopped it, a line saying which)."""
    owner = Owner.from_labels(container.labels)
    image = container.labels.get(docker_client.LABEL_IMAGE, "?")
    name = f"container {container.id[:12]} (image {image})"
    if owner is None:
        return None, False, f"left {name} of this run folder alone: it names no owner; `matrixbench clean` removes it"
    lease = Lease.from_labels(container.labels)
    alive, how = judge(owner, lease, here)
    if alive is False:
        container.stop(timeout=5)
        if lease is not None:
            lease.discard()
        if not container.remove():   # another process removed it meanwhile: two Ray nodes on one Docker daemon
            return False, False, (f"{name} of a killed run ({owner.describe()}, {how}) was removed meanwhile by "
                                  "another process")
        return False, True, f"stopped {name}: left running by a killed run ({owner.describe()}, {how})"
    why = f"its owner {owner.describe()} {how}" + ("" if alive else "; `matrixbench clean` removes it")
    return alive, False, f"left {name} of this run folder alone: {why}"


def _refuse_stale(image: ImageInfo, tag: str, request: RunRequest) -> None:
    """An image built from another definition of its matrix entry (or before images carried
    the label) is stale: its records would be labelled with what it does not hold."""
    built = image.labels.get(docker_client.LABEL_CONTENT_HASH)
    if request.image.content_hash and built != request.image.content_hash:
        raise RunError(
            f"image {request.image.name!r}: {tag} was built from another definition of the image "
            f"(content hash {built or 'none'}, the matrix's is {request.image.content_hash}); rebuild it with "
            f"`matrixbench build --images {request.image.name}`"
        )


def runner_argv(cells_file: Union[str, Path] = CELLS_FILENAME) -> List[str]:
    """The argv after the image's ENTRYPOINT (python -m runner); ``cells_file`` relative to out_dir."""
    return ["--cells", f"{RESULTS_MOUNT}/{Path(cells_file).as_posix()}", "--out", RESULTS_MOUNT]


def mounts(request: RunRequest) -> Dict[Path, Tuple[str, str]]:
    """Host folder -> (container folder, mode); host folders are made here so Docker does
    not create them as root."""
    table = {Path(request.paths.out_dir): (RESULTS_MOUNT, "rw")}
    if request.paths.hf_cache_dir is not None:
        table[Path(request.paths.hf_cache_dir)] = (HF_MOUNT, "rw")
    if request.paths.cache_dir is not None:
        table[Path(request.paths.cache_dir)] = (COMPILE_CACHE_MOUNT, "rw")
    if request.placement.timing_board is not None:
        table[Path(request.placement.timing_board)] = (TIMING_BOARD_MOUNT, "rw")
    if request.work.turns is not None:
        table[Path(request.work.turns.folder)] = (TURNS_MOUNT, "rw")
    for host in table:
        host.mkdir(parents=True, exist_ok=True)
    return {host.resolve(): target for host, target in table.items()}


def model_mounts(cells: Sequence[Cell]) -> Dict[Path, Tuple[str, str]]:
    """The folder of each model given by a local config or checkpoint -> (/models/<model>, "ro"):
    the container sees the user's own models read-only, at a path of its own."""
    table: Dict[Path, Tuple[str, str]] = {}
    for cell in cells:
        folder = _model_folder(cell)
        if folder is not None and folder not in table:
            table[folder] = (f"{MODELS_MOUNT}/{cell.model}", "ro")
    return table


def in_container(cell: Cell, models: Mapping[Path, Tuple[str, str]]) -> Cell:
    """The cell as the container sees it: a local config_path rewritten to its mount."""
    folder = _model_folder(cell)
    if folder is None or not cell.config_path:
        return cell
    return dataclasses.replace(cell, config_path=f"{models[folder][0]}/{Path(cell.config_path).name}")


def _model_folder(cell: Cell) -> Optional[Path]:
    return Path(cell.config_path).resolve().parent if cell.config_path else None


def container_env(request: RunRequest) -> Dict[str, str]:
    """The container's whole environment: an allow-list, never a copy of os.environ.

    HOME and USER are set because the host uid may have no passwd entry in the image
    (getpass and ~ would fail). Without a compile-cache folder (--cold) no cache variable is
    set: the runner compiles each cell in a scratch folder of its own.
    """
    env = {"HOME": "/tmp", "USER": "matrixbench"}
    env.update(compile_cache_env(COMPILE_CACHE_MOUNT if request.paths.cache_dir is not None else None))
    if request.paths.hf_cache_dir is not None:
        env["HF_HOME"] = HF_MOUNT
    env.update(request.placement.slot_env(board_dir=TIMING_BOARD_MOUNT))
    env.update(request.env)
    return env


