"""A stand-in for the docker SDK client, for unit tests of matrixbench.build.docker_client and its
users. It fakes only the SDK surface docker_client touches (the one seam)."""
from docker.errors import APIError, ImageNotFound, NotFound

from matrixbench.build.docker_client import DockerClient


class FakeImage:
    def __init__(self, tag, labels, image_id="sha256:feedface"):
        self.tags = [tag] if tag else []
        self.labels = labels
        self.id = image_id
        self.short_id = image_id[:19]
        self.names = None   # the FakeSDK's images_by_tag, set by FakeImages.get (for tag)

    def tag(self, repository, tag):
        self.names[f"{repository}:{tag}"] = self


class FakeContainer:
    def __init__(self, sdk, image, command, kwargs, log=b"", exit_code=0, on_wait=None, log_raises=None):
        self.sdk = sdk
        self.id = f"c{len(sdk.started):011d}deadbeef"
        self.image, self.command, self.kwargs = image, command, kwargs
        self.labels = kwargs.get("labels") or {}
        self.log, self.exit_code, self.on_wait, self.log_raises = log, exit_code, on_wait, log_raises
        self.calls = []
        self.start_tried = False

    def logs(self, stream=False, follow=False, tail=None):
        if stream:
            return self._stream()
        lines = self.log.splitlines(keepends=True)
        return b"".join(lines[-tail:] if tail else lines)

    def _stream(self):
        yield from [self.log[i:i + 7] for i in range(0, len(self.log), 7)]
        if self.log_raises:
            raise self.log_raises

    def start(self):
        """Docker starts a created container; a start refused (sdk.run_error: no GPU driver, a bad mount) leaves
        the created container behind, as the real daemon does."""
        self.start_tried = True
        if self.sdk.run_error:
            raise self.sdk.run_error

    def wait(self):
        self.calls.append("wait")
        if self.on_wait:
            self.on_wait(self)
        return {"StatusCode": self.exit_code}

    def stop(self, timeout=10):
        self.calls.append("stop")

    def kill(self):
        self.calls.append("kill")

    def remove(self, force=False):
        self.calls.append("remove")
        if self in self.sdk.started_live:
            self.sdk.started_live.remove(self)
        else:
            raise NotFound("gone")


class FakeImages:
    def __init__(self, sdk):
        self.sdk = sdk

    def get(self, tag):
        if tag not in self.sdk.images_by_tag:
            raise ImageNotFound(f"No such image: {tag}")
        image = self.sdk.images_by_tag[tag]
        image.names = self.sdk.images_by_tag
        return image

    def pull(self, reference):
        if self.sdk.pull_error:
            raise self.sdk.pull_error
        self.sdk.pulled.append(reference)
        pushed = self.sdk.remote.get(reference)   # what a push put in the (shared) fake registry
        self.sdk.images_by_tag[reference] = FakeImage(reference, dict(pushed.labels) if pushed else {},
                                                      pushed.id if pushed else f"sha256:pulled{len(self.sdk.pulled)}")

    def list(self, filters=None):
        return [image for image in self.sdk.images_by_tag.values()
                if _matches(image.labels, filters["label"])]

    def remove(self, tag, force=False, noprune=False):
        self.sdk.removed_images.append(tag)
        for key, image in list(self.sdk.images_by_tag.items()):
            if tag in (key, image.id):
                del self.sdk.images_by_tag[key]


class FakeContainers:
    def __init__(self, sdk):
        self.sdk = sdk

    def create(self, image, command, **kwargs):
        """A created container (started with its start(); the SDK's containers.run is create + start)."""
        if self.sdk.create_error:
            raise self.sdk.create_error
        answer = {"log": self.sdk.python_answer} if kwargs.get("entrypoint") == "python" else {}   # build_facts.PROBE
        container = FakeContainer(self.sdk, image, command, kwargs, **{**self.sdk.next_container, **answer})
        self.sdk.started.append(container)
        self.sdk.started_live.append(container)
        return container

    def list(self, all=False, filters=None, ignore_removed=False):
        """As docker's SDK: it lists ids, then inspects each; one removed in between (``sdk.vanishing``: ids) raises
        NotFound unless ``ignore_removed``."""
        from docker.errors import NotFound
        found = []
        for container in self.sdk.started_live:
            if getattr(container, "id", None) in getattr(self.sdk, "vanishing", ()):
                if not ignore_removed:
                    raise NotFound(f"No such container: {container.id}")
                continue
            if _matches(container.labels, filters["label"]):
                found.append(container)
        return found


class FakeAPI:
    def __init__(self, sdk):
        self.sdk = sdk

    def build(self, **kwargs):
        self.sdk.build_calls.append(kwargs)
        for chunk in self.sdk.build_chunks:
            if isinstance(chunk, Exception):
                raise chunk
            yield chunk
        if not any("error" in chunk for chunk in self.sdk.build_chunks if isinstance(chunk, dict)):
            self.sdk.builds += 1
            self.sdk.images_by_tag[kwargs["tag"]] = FakeImage(kwargs["tag"], kwargs["labels"],
                                                              f"sha256:build{self.sdk.builds}")


    def push(self, repository, tag=None, stream=False, decode=False):
        reference = f"{repository}:{tag}"
        for chunk in self.sdk.push_chunks:
            if isinstance(chunk, Exception):
                raise chunk
            yield chunk
        if not any("error" in chunk for chunk in self.sdk.push_chunks if isinstance(chunk, dict)):
            self.sdk.remote[reference] = self.sdk.images_by_tag[reference]


class FakeSDK:
    """Records what was asked of it; ``build_chunks`` and ``next_container`` script the answers."""

    def __init__(self, runtimes=None, build_chunks=(), fail_ping=None):
        self.runtimes = runtimes or {"runc": {}}
        self.build_chunks = list(build_chunks)
        self.fail_ping = fail_ping
        self.build_calls, self.started, self.started_live, self.removed_images = [], [], [], []
        self.images_by_tag = {}
        self.next_container = {}
        self.run_error = None     # raised by a container's start() (the created container stays, as in Docker)
        self.create_error = None  # raised by containers.create (no such image)
        self.pull_error = None   # raised by images.pull (a base image neither local nor pullable)
        self.pulled = []
        self.remote = {}        # a registry: reference -> the FakeImage pushed there (share it between SDKs)
        self.push_chunks = [{"status": "The push refers to repository [fake]"}, {"id": "abc", "status": "Pushed"},
                            {"id": "abc", "status": "Pushing", "progressDetail": {"current": 1}}]
        self.builds = 0
        # what an image's python answers build_facts.PROBE: PyPI's torch 2.0.1 (as its wheel says it is)
        self.python_answer = (b'{"torch": "2.0.1+cu117", "cuda": "11.7", "arch_list": ["sm_37", "sm_50", "sm_60", '
                              b'"sm_70", "sm_75", "sm_80", "sm_86"]}\n')
        self.api = FakeAPI(self)
        self.images = FakeImages(self)
        self.containers = FakeContainers(self)

    def ping(self):
        if self.fail_ping:
            raise self.fail_ping
        return True

    def info(self):
        return {"Runtimes": self.runtimes}


def _matches(labels, selectors):
    for selector in selectors:
        key, _, value = selector.partition("=")
        if key not in labels or (value and labels[key] != value):
            return False
    return True


__all__ = ["FakeSDK", "FakeImage", "APIError"]


def client_with_leftovers():
    """A DockerClient over a FakeSDK holding what `matrixbench clean` looks for, beside what it
    must keep: containers of runs r1 and r2 and the image matrixbench:stable (all labelled), a
    postgres container and the image postgres:16 (not labelled). Returns (sdk, client)."""
    sdk = FakeSDK()
    client = DockerClient(sdk)
    for run_id in ("r1", "r2"):
        client.start_container("matrixbench:stable", [], user="0:0", env={}, mounts={},
                               labels={"matrixbench": "1", "matrixbench.run_id": run_id})
    client.start_container("postgres", [], user="0:0", env={}, mounts={}, labels={})
    sdk.images_by_tag["matrixbench:stable"] = FakeImage("matrixbench:stable", {"matrixbench": "1"})
    sdk.images_by_tag["postgres:16"] = FakeImage("postgres:16", {})
    return sdk, client
