"""The one module that imports the docker SDK: a thin wrapper the rest of matrixbench uses.

Tests fake the SDK at one seam: ``DockerClient(sdk)`` takes any object shaped like
``docker.DockerClient``; ``connect()`` is the only place that calls ``docker.from_env()``.
"""
import json
import os
from collections import deque
from dataclasses import dataclass

from matrixbench.errors import DockerUnavailableError, RunError
from matrixbench.gpu import LIST_GPUS, gpu_lines

# Every container and image matrixbench makes carries LABEL_MARK, so leftovers can be found.
LABEL_MARK = "matrixbench"
LABEL_IMAGE = "matrixbench.image"
LABEL_TORCH = "matrixbench.torch"
# matrix.Image.content_hash() of the entry an image was built from (run.json's image_hashes).
LABEL_CONTENT_HASH = "matrixbench.image_content_hash"
# images.runner_hash() of the runner/ sources baked into an image (an image is current only with both).
LABEL_RUNNER_HASH = "matrixbench.runner_hash"
LABEL_RUN_ID = "matrixbench.run_id"
# The run folder a container writes (resolved), and its owner: matrixbench.run.owner.Owner.labels().
LABEL_RUN_DIR = "matrixbench.run_dir"

START_HINT = (
    "start it with `sudo systemctl start docker` (or `sudo dockerd &`), "
    "or run without Docker: --backend local"
)


def connect():
    """A DockerClient for the daemon in the environment (DOCKER_HOST or the local socket)."""
    try:
        import docker
    except ImportError as exc:
        raise DockerUnavailableError(
            f"the docker Python package is missing ({exc}); pip install 'docker>=7', "
            "or run without Docker: --backend local"
        ) from exc
    try:
        sdk = docker.from_env()
        sdk.ping()
    except docker.errors.DockerException as exc:
        raise DockerUnavailableError(unavailable_message(exc)) from exc
    return DockerClient(sdk)


def unavailable_message(exc):
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"no Docker daemon answers at {where} ({reason}); {START_HINT}"


def gpu_request(device_ids=None):
    """`--gpus all` in SDK terms, or `--gpus '"device=0,2"'` for chosen GPUs (indices or UUIDs)."""
    from docker.types import DeviceRequest

    if device_ids:
        return DeviceRequest(device_ids=[str(d) for d in device_ids], capabilities=[["gpu"]])
    return DeviceRequest(count=-1, capabilities=[["gpu"]])


# What a throwaway container runs to see whether Docker can hand it GPUs: the NVIDIA container
# toolkit (or CDI) mounts nvidia-smi into any container given a GPU request.
GPU_PROBE_ENTRYPOINT, *GPU_PROBE_ARGS = LIST_GPUS


class BuildStream:
    """Turns the SDK's decoded build chunks into whole log lines; keeps a tail for errors."""

    def __init__(self, tail_lines=40):
        self.tail = deque(maxlen=tail_lines)
        self.error = None
        self._partial = ""

    def feed(self, chunk):
        """Take one decoded chunk; return the complete lines it finished."""
        if "error" in chunk:
            self.error = chunk.get("error") or json.dumps(chunk.get("errorDetail"))
            return self._keep([f"ERROR: {self.error}"])
        text = self._partial + chunk.get("stream", "")
        *lines, self._partial = text.split("\n")
        return self._keep([line.rsplit("\r", 1)[-1] for line in lines if line.strip()])

    def flush(self):
        rest, self._partial = self._partial, ""
        return self._keep([rest] if rest.strip() else [])

    def _keep(self, lines):
        self.tail.extend(lines)
        return lines


class Container:
    """A started container: its log lines, its exit code, stop and remove."""

    def __init__(self, sdk_container):
        self._sdk = sdk_container
        self.id = sdk_container.id
        self.labels = dict(sdk_container.labels or {})

    def log_lines(self):
        """Follow stdout+stderr until the container exits, a line at a time."""
        partial = b""
        for chunk in self._sdk.logs(stream=True, follow=True):
            partial += chunk
            *lines, partial = partial.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace")
        if partial:
            yield partial.decode("utf-8", "replace")

    def wait(self):
        """Block until it exits; its exit code."""
        return int(self._sdk.wait()["StatusCode"])

    def stop(self, timeout=10):
        _ignore_missing(self._sdk.stop, timeout=timeout)

    def kill(self):
        _ignore_missing(self._sdk.kill)

    def remove(self):
        """Remove it; False where it was already gone or being removed (another process got there first)."""
        return _ignore_missing(self._sdk.remove, force=True)


def _ignore_missing(action, **kwargs):
    """Stop/kill/remove: a container that is already gone is fine. True where this call did it."""
    from docker.errors import APIError, NotFound

    try:
        action(**kwargs)
    except NotFound:
        return False
    except APIError as exc:
        if exc.status_code not in (404, 409):  # 409: not running / removal in progress
            raise
        return False
    return True


@dataclass(frozen=True)
class ImageInfo:
    id: str
    labels: dict


class DockerClient:
    """What matrixbench asks of Docker, and nothing else."""

    def __init__(self, sdk):
        self._sdk = sdk

    def build(self, context_tar, tag, buildargs, labels, nocache=False, network_mode=None):
        """Build from an in-memory tar context; yield the decoded chunks as they stream.
        ``network_mode="host"`` runs the RUN steps on the host's network.

        An SDK failure (bad request, daemon gone) arrives as a last ``{"error": ...}`` chunk,
        the same shape as a failed build step.
        """
        from docker.errors import DockerException

        network = {"network_mode": network_mode} if network_mode else {}
        try:
            yield from self._sdk.api.build(
                fileobj=context_tar, custom_context=True, tag=tag, buildargs=buildargs,
                labels=labels, nocache=nocache, rm=True, forcerm=True, decode=True, **network,
            )
        except DockerException as exc:
            yield {"error": str(exc)}

    def inspect_image(self, tag):
        """The local image's id and labels, or None when there is no such image."""
        from docker.errors import ImageNotFound

        try:
            image = self._sdk.images.get(tag)
        except ImageNotFound:
            return None
        return ImageInfo(id=image.id, labels=dict(image.labels or {}))

    def ensure_image(self, reference):
        """Have ``reference`` locally, pulling it if need be; None when it is there, else why not."""
        from docker.errors import DockerException, ImageNotFound

        try:
            self._sdk.images.get(reference)
            return None
        except ImageNotFound:
            pass
        try:
            self._sdk.images.pull(reference)
        except DockerException as exc:
            return str(exc)
        return None

    def gpu_probe(self, image, device_ids=None):
        """The GPUs a container of ``image`` sees when it asks for them (``nvidia-smi -L`` lines,
        "GPU 0: NAME (UUID: GPU-...)"); [] when Docker cannot give GPUs. Works with the NVIDIA
        container toolkit or CDI, with or without an ``nvidia`` runtime in ``docker info``."""
        from docker.errors import DockerException

        try:
            container = self._started(image, GPU_PROBE_ARGS, entrypoint=GPU_PROBE_ENTRYPOINT,
                                      labels={LABEL_MARK: "1"}, device_requests=[gpu_request(device_ids)])
        except DockerException:
            return []
        try:
            exit_code = int(container.wait()["StatusCode"])
            output = container.logs().decode("utf-8", "replace")
        except DockerException:
            return []
        finally:
            _ignore_missing(container.remove, force=True)
        return gpu_lines(output) if exit_code == 0 else []

    def python_output(self, image, code):
        """(exit code, output) of ``python -c code`` in a container of ``image``, no GPU, no network;
        (None, why) when Docker cannot run it."""
        from docker.errors import DockerException

        try:
            container = self._started(image, ["-c", code], entrypoint="python", labels={LABEL_MARK: "1"},
                                      network_disabled=True)
        except DockerException as exc:
            return None, str(exc)
        try:
            exit_code = int(container.wait()["StatusCode"])
            return exit_code, container.logs().decode("utf-8", "replace")
        except DockerException as exc:
            return None, str(exc)
        finally:
            _ignore_missing(container.remove, force=True)

    def _started(self, image, command, **kwargs):
        """A container of ``image`` created, then started (detached). One whose start fails (no GPU driver for
        its device request, a bad mount) is removed before the error passes on: ``containers.run`` would leave
        it behind in "Created", where nothing of matrixbench's would ever look for it."""
        from docker.errors import DockerException

        container = self._sdk.containers.create(image, command, **kwargs)
        try:
            container.start()
        except DockerException:
            _ignore_missing(container.remove, force=True)
            raise
        return container

    def start_container(self, image, command, *, user, env, mounts, labels, gpus=False, name=None,
                        gpu_ids=None, cpuset_cpus=None, cpuset_mems=None):
        """Start a detached container; ``mounts`` maps host path -> (container path, mode);
        ``gpu_ids`` (indices or UUIDs) narrows ``gpus`` to those GPUs; ``cpuset_cpus`` ("0-3")
        and ``cpuset_mems`` ("0") pin it to a slot's cores and NUMA node."""
        from docker.errors import DockerException

        volumes = {str(host): {"bind": path, "mode": mode} for host, (path, mode) in mounts.items()}
        try:
            sdk_container = self._started(
                image, command, user=user, environment=env, volumes=volumes,
                labels=labels, name=name, shm_size="2g", init=True,  # init: forwards SIGTERM, reaps cells
                device_requests=[gpu_request(gpu_ids)] if gpus else None,
                **_cpusets(cpuset_cpus, cpuset_mems),
            )
        except DockerException as exc:  # the message names the image, never the environment
            raise RunError(f"Docker could not start a container of {image}: {exc}") from exc
        return Container(sdk_container)

    def find_containers(self, labels):
        """All containers (running or not) carrying every label in ``labels``. One removed between the listing and its
        inspection (another Ray node's runner ending on a shared daemon) is left out, not a NotFound (CI, stop 23)."""
        found = self._sdk.containers.list(all=True, filters={"label": _label_filters(labels)}, ignore_removed=True)
        return [Container(c) for c in found]

    def find_images(self, labels):
        """Tags (short ids for untagged ones: earlier builds) of images carrying every label."""
        found = self._sdk.images.list(filters={"label": _label_filters(labels)})
        return [image.tags[0] if image.tags else image.short_id for image in found]

    def remove_image(self, tag):
        self._sdk.images.remove(tag, force=True)

    def tag_image(self, source, target):
        """Give the local image ``source`` the name ``target`` ("host:port/repo:tag")."""
        repository, _, tag = target.rpartition(":")
        self._sdk.images.get(source).tag(repository, tag)

    def push_image(self, reference, emit):
        """Push ``reference`` to its registry, ``emit(line)`` per status line; None when done, else why not."""
        from docker.errors import DockerException

        repository, _, tag = reference.rpartition(":")
        try:
            for chunk in self._sdk.api.push(repository, tag=tag, stream=True, decode=True):
                if "error" in chunk:
                    return chunk["error"]
                if chunk.get("status") and not chunk.get("progressDetail"):
                    emit(" ".join(str(chunk[key]) for key in ("id", "status") if chunk.get(key)))
        except DockerException as exc:
            return str(exc)
        return None

    def pull_image(self, reference):
        """Pull ``reference`` (even when a local image has its name); None when done, else why not."""
        from docker.errors import DockerException

        try:
            self._sdk.images.pull(reference)
        except DockerException as exc:
            return str(exc)
        return None

    def discard_image(self, image_id):
        """Remove an image a rebuild replaced; one still in use (or gone) is left alone."""
        from docker.errors import APIError

        try:
            self._sdk.images.remove(image_id, force=False, noprune=False)
        except APIError:
            pass


def _cpusets(cpus, mems):
    """Only the cpuset arguments given (the SDK's defaults otherwise)."""
    return {key: value for key, value in (("cpuset_cpus", cpus), ("cpuset_mems", mems)) if value is not None}


def _label_filters(labels):
    return [key if value is None else f"{key}={value}" for key, value in labels.items()]
