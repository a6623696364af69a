"""Images through a registry (issue 16: ``matrixbench run --executor ray --set registry=HOST:PORT``).

The driver pushes each image the run needs once, as built on its own machine (``publish``); on every
GPU node a task pulls it and names it as a local build would be named (``fetch``), so the node's
docker backend finds ``matrixbench:<image>`` and checks its content hash as it does for a local
build. An image is pushed only when it is current here (built from its matrix entry and this runner,
``images.is_current``), and used on a node only when what was pulled is current there too: a node
never runs an image other than the one the matrix names.
"""
from typing import Callable, List, Sequence

from matrixbench.build import docker_client
from matrixbench.build.docker_client import DockerClient
from matrixbench.build.images import built_from, image_tag, is_current, runner_hash
from matrixbench.errors import BuildError
from matrixbench.matrix import Image

REACH_HINT = ("is a registry listening there (Debian's docker-registry, or the registry:2 image)? Docker "
              "speaks plain HTTP only to registries on 127.0.0.0/8 or listed in dockerd's insecure-registries")


class RegistryError(BuildError):
    """An image could not go through the registry, or what came back is not the matrix's image."""


def reference(registry: str, image_name: str) -> str:
    """The image's name in the registry: ``HOST:PORT/matrixbench:<image>``."""
    return f"{registry}/{image_tag(image_name)}"


def publish(client: DockerClient, images: Sequence[Image], registry: str, emit: Callable[[str, str], None]) -> None:
    """Push each of ``images`` (matrix.Image) from this machine's Docker to ``registry``."""
    for image in images:
        tag = image_tag(image.name)
        if not is_current(client, image):
            raise RegistryError(
                f"registry {registry}: this machine's Docker has no {tag} built from the matrix entry "
                f"{image.name!r} and this version's runner; run `matrixbench build --images {image.name}` "
                "here first, then the run pushes it")
        target = reference(registry, image.name)
        client.tag_image(tag, target)
        why = client.push_image(target, lambda line, name=image.name: emit(name, line))
        if why:
            raise RegistryError(f"registry {registry}: pushing {target} failed: {why}; {REACH_HINT}")
        emit(image.name, f"pushed {target} (content hash {image.content_hash()})")


def fetch(client: DockerClient, images: Sequence[Image], registry: str) -> List[str]:
    """On a node: pull each of ``images`` from ``registry`` and name it ``matrixbench:<image>``, after
    checking it is the matrix entry's; the lines to show the user."""
    lines = []
    for image in images:
        source, tag = reference(registry, image.name), image_tag(image.name)
        why = client.pull_image(source)
        if why:
            raise RegistryError(f"registry {registry}: pulling {source} on this node failed: {why}; "
                                f"{REACH_HINT}")
        labels = client.inspect_image(source).labels
        if not built_from(labels, image):
            raise RegistryError(
                f"registry {registry}: {source} is not the matrix's image {image.name!r}: content hash "
                f"{labels.get(docker_client.LABEL_CONTENT_HASH) or 'none'} and runner "
                f"{labels.get(docker_client.LABEL_RUNNER_HASH) or 'none'}, the matrix's are "
                f"{image.content_hash()} and {runner_hash()}; rerun the driver, which pushes its current build")
        client.tag_image(source, tag)
        lines.append(f"[{image.name}] pulled {source} as {tag} (content hash {image.content_hash()})")
    return lines

