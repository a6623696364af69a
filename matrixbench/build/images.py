"""`matrixbench build`: one Docker image per matrix.yaml image entry, from images/Dockerfile.

Each build is one matrix.Image (its fields already checked by the matrix schema): ``torch`` and
``transformers`` requirements, ``index_url`` (where torch comes from; CUDA builds), ``python``,
``base_image``, ``extra_pins``, ``extra_index_urls``. ``env`` is a run-time setting and is not
baked into the image. Images are labelled with the entry's ``content_hash()``, which
`matrixbench run` compares with the matrix's to refuse a stale image. Before a build, an index that does not
answer from this host is left out of its build args as it is of a venv's pip (``choose_indexes``), and the
image's label ``indexes.LABEL`` records the indexes it used.
"""
import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from matrixbench import resources
from matrixbench.build import docker_client, indexes, turns, wheelhouse
from matrixbench.build import facts as build_facts
from matrixbench.build.versions import torch_label
from matrixbench.errors import BuildError, MatrixError
from matrixbench.paths import cache_home
from matrixbench.redact import redact_urls

DEFAULT_INDEX_URL = "https://pypi.org/simple"
TAG_REPOSITORY = "matrixbench"
DOCKER_PIP = "this host's pip download and the Docker build"


@dataclass(frozen=True)
class BuildSpec:
    """Everything one `docker build` gets: what --dry-run prints."""

    name: str
    tag: str
    buildargs: dict
    labels: dict
    ca_bundle: Optional[Path]

    def describe(self):
        lines = [f"{self.tag}  (image {self.name!r}, base {self.buildargs['BASE_IMAGE']})"]
        lines += [f"  --build-arg {key}={redact_urls(value)}" for key, value in sorted(self.buildargs.items())]
        lines += [f"  --label {key}={value}" for key, value in sorted(self.labels.items())]
        lines.append(f"  ca bundle: {self.ca_bundle or 'none'}")
        return "\n".join(lines)


def image_tag(image_name):
    """The local tag of an image entry's build; the docker backend runs this tag."""
    return f"{TAG_REPOSITORY}:{image_name}"


def build_images(matrix, image_names, *, no_cache=False, dry_run=False, ca_bundle=None,
                 index_url=None, extra_index_urls=(), base_image=None, on_progress=None, keep_current=False):
    """Build the named images (all when ``image_names`` is None); return their tags.

    ``on_progress(image_name, line)`` gets every build log line (and, with ``dry_run``, the
    description of each build); it defaults to printing ``[name] line``. ``dry_run`` needs
    no Docker daemon. A failed build raises BuildError carrying the log tail. ``keep_current``: an image
    Docker already has current (``is_current``, asked in the build's turn) is kept, and only the tags built
    are returned.
    """
    emit = on_progress or print_progress
    images = select_images(matrix, image_names)
    plans = [
        build_spec(image, ca_bundle=ca_bundle, index_url=index_url,
                   extra_index_urls=extra_index_urls, base_image=base_image)
        for image in images
    ]
    if dry_run:
        for plan in plans:
            for line in plan.describe().splitlines():
                emit(plan.name, line)
        return [plan.tag for plan in plans]
    client = docker_client.connect()
    built = [run_build(client, plan, no_cache=no_cache, emit=emit, unless_current=image if keep_current else None)
             for image, plan in zip(images, plans)]
    return [tag for tag in built if tag is not None]


@dataclass(frozen=True)
class BuildOptions:
    """The user's build options (matrix.BuildSettings but the registry: build's flags, matrix.yaml, --set), as they
    travel to another machine: the CA bundle as its bytes, since the path is only this machine's."""

    ca_bundle_pem: Optional[bytes] = None
    index_url: Optional[str] = None
    extra_index_urls: tuple = ()
    base_image: Optional[str] = None

    @classmethod
    def given(cls, *, ca_bundle=None, index_url=None, extra_index_urls=(), base_image=None):
        """From the command line's options; None when none is given."""
        if not (ca_bundle or index_url or extra_index_urls or base_image):
            return None
        pem = _checked_ca_bundle(ca_bundle).read_bytes() if ca_bundle else None
        return cls(pem, index_url, tuple(extra_index_urls), base_image)

    @classmethod
    def of(cls, build):
        """From a matrix's build settings (matrix.BuildSettings: matrix.yaml, --set, build's flags); None when
        none of them is set."""
        return cls.given(**build.image_options())

    @contextmanager
    def spec_options(self):
        """``build_spec``'s keyword options, the CA bundle written to a file that lasts the with block."""
        with tempfile.TemporaryDirectory(prefix="matrixbench-ca-") as folder:
            ca_bundle = None
            if self.ca_bundle_pem is not None:
                ca_bundle = Path(folder) / "ca-bundle.pem"
                ca_bundle.write_bytes(self.ca_bundle_pem)
            yield {"ca_bundle": ca_bundle, "index_url": self.index_url,
                   "extra_index_urls": self.extra_index_urls, "base_image": self.base_image}


# Docker's own bookkeeping lines: kept in the error tail, not shown as progress.
_BOOKKEEPING = re.compile(r"^\s*---> |^Removing intermediate container |^Successfully tagged ")


def print_progress(image_name, line):
    print(f"[{image_name}] {line}", flush=True)


def select_images(matrix, image_names):
    """The matrix's Image entries named (in that order), or all of them; unknown names are an error."""
    if image_names is None:
        return list(matrix.images.values())
    unknown = [name for name in image_names if name not in matrix.images]
    if unknown:
        raise MatrixError(
            f"--images: unknown image(s) {', '.join(unknown)}; the matrix defines "
            f"{', '.join(matrix.images) or 'none'}"
        )
    return [matrix.images[name] for name in image_names]


def build_spec(image, *, ca_bundle=None, index_url=None, extra_index_urls=(), base_image=None):
    """The build args and labels of one matrix.Image (validated by the matrix schema); options
    override the entry. The content-hash label lets `matrixbench run` refuse a stale image."""
    buildargs = {
        # --base-image, else the entry's (the matrix fills in its default); {python} filled in
        "BASE_IMAGE": (base_image or image.base_image).format(python=image.python),
        "PYTHON": f"python{image.python}",
        "TORCH_SPEC": image.torch,
        "TORCH_INDEX_URL": image.index_url or "",
        "TRANSFORMERS_SPEC": image.transformers,
        "EXTRA_PINS": _joined(image.extra_pins, f"images.{image.name}.extra_pins"),
        "INDEX_URL": index_url or DEFAULT_INDEX_URL,
        "EXTRA_INDEX_URLS": _joined([*image.extra_index_urls, *extra_index_urls],
                                    f"images.{image.name}.extra_index_urls / --extra-index-url"),
    }
    labels = {
        docker_client.LABEL_MARK: "1",
        docker_client.LABEL_IMAGE: image.name,
        docker_client.LABEL_TORCH: torch_label(image.torch),
        docker_client.LABEL_CONTENT_HASH: image.content_hash(),
        docker_client.LABEL_RUNNER_HASH: runner_hash(),
    }
    buildargs["FIND_LINKS"] = ""  # the wheelhouse's URL, set for the build only (run_build)
    return BuildSpec(name=image.name, tag=image_tag(image.name), buildargs=buildargs, labels=labels,
                     ca_bundle=_checked_ca_bundle(ca_bundle))


def _joined(items, field):
    items = [items] if isinstance(items, str) else list(items)
    spaced = [item for item in items if not item or any(ch.isspace() for ch in str(item))]
    if spaced:
        raise MatrixError(f"{field}: {spaced[0]!r} must be one non-empty word without spaces")
    return " ".join(str(item) for item in items)


def _checked_ca_bundle(ca_bundle):
    if ca_bundle is None:
        return None
    path = Path(ca_bundle)
    if not path.is_file():
        raise BuildError(
            f"ca_bundle {path}: no such file (build --ca-bundle, or ca_bundle: in matrix.yaml / --set, relative "
            "to the matrix file); give a PEM bundle such as /etc/ssl/certs/ca-certificates.crt"
        )
    return path


def runner_hash():
    """A short hash of the runner/ sources a build bakes in (as build_context adds them)."""
    digest = hashlib.sha256()
    root = resources.runner_dir()
    for path in sorted(Path(root).rglob("*")):
        if path.is_file() and not _byte_code(path.parts):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def built_from(labels, image):
    """An image with ``labels`` was built from this very matrix entry (its content-hash label) with this
    runner (its runner-hash label): nothing a build would change."""
    return (labels.get(docker_client.LABEL_CONTENT_HASH) == image.content_hash()
            and labels.get(docker_client.LABEL_RUNNER_HASH) == runner_hash())


def is_current(client, image):
    """Docker has ``image``'s tag, built from this very matrix entry with this runner (``built_from``)."""
    info = client.inspect_image(image_tag(image.name))
    return info is not None and built_from(info.labels, image)


def building(tag, *, emit, name, environ=None):
    """Held while ``tag`` is built: two builds of one image on this machine (two users, two test workers) take
    turns, so the second finds the first's layers in Docker's cache instead of building them again beside it,
    and neither discards the image the other just made. The lock is a file under the cache folder."""
    lock_file = cache_home(environ) / "locks" / f"build-{re.sub(r'[^A-Za-z0-9_.-]', '_', tag)}.lock"
    return turns.taking_turns(lock_file, say=lambda line: emit(name, line),
                              waiting=f"waiting for another build of {tag} on this machine to finish")


def run_build(client, plan, *, no_cache, emit, unless_current=None):
    """Build one plan, streaming its log lines to ``emit``; return the tag. One build of a tag at a time
    (``building``). ``unless_current`` (its matrix.Image): asked in the build's own turn, an image Docker already
    has current is kept and None returned, so that two processes that both found it stale (two Ray units on one
    node, two test workers) build it once: asked before the turn, the second rebuilt it under the first's
    running containers."""
    with building(plan.tag, emit=emit, name=plan.name):
        if unless_current is not None and is_current(client, unless_current):
            emit(plan.name, f"{plan.tag} is current (content hash {unless_current.content_hash()}): not built")
            return None
        return _run_build(client, plan, no_cache=no_cache, emit=emit)


def _run_build(client, plan, *, no_cache, emit):
    started = time.monotonic()
    previous = client.inspect_image(plan.tag)
    missing_base = client.ensure_image(plan.buildargs["BASE_IMAGE"])
    if missing_base:  # before the wheelhouse is filled: that can take minutes, the build would fail at FROM
        raise BuildError(f"building image {plan.name!r} ({plan.tag}) failed: {missing_base}{_base_image_hint(plan)}")
    chosen = choose_indexes(plan, emit)
    with wheelhouse.offered(plan, python_version(plan), emit=emit, indexes=chosen) as offer:
        plan = with_indexes(plan, chosen, offer.used or chosen.record())
        emit(plan.name, f"building {plan.tag} from {plan.buildargs['BASE_IMAGE']}")
        stream = _stream_build(client, plan, no_cache, offer.url, emit)
    if stream.error:
        tail = "\n".join(stream.tail)
        raise BuildError(
            f"building image {plan.name!r} ({plan.tag}) failed: {stream.error}{_hint(stream, plan)}\n"
            f"--- last {len(stream.tail)} lines of the build log ---\n{tail}"
        )
    facts = record_facts(client, plan, emit)
    if previous is not None and previous.id != client.inspect_image(plan.tag).id:
        client.discard_image(previous.id)  # the old build would linger untagged
    emit(plan.name, f"built {plan.tag} ({facts.describe()}) in {time.monotonic() - started:.0f} s")
    return plan.tag


def choose_indexes(plan, emit):
    """The plan's indexes that answer from this host (matrixbench/build/indexes.py), each left out said in one
    line: the build's pip is taken to reach what this host reaches (the build runs on the host's network when
    the wheelhouse is served to it; Docker's default network has the host's routes, and its DNS unless the
    daemon names another). Proxies are read from this process's environment, as for the host's pip."""
    chosen = indexes.choose(plan.name, plan.buildargs, os.environ)
    for line in chosen.lines(of=DOCKER_PIP):
        emit(plan.name, line)
    return chosen


def with_indexes(plan, chosen, used):
    """``plan`` with the build args of the indexes ``chosen`` and the label of what the build ``used``
    (indexes.Indexes.record: torch's index, the indexes left out), which doctor reads."""
    labels = {**plan.labels, indexes.LABEL: json.dumps(used, sort_keys=True)}
    return replace(plan, buildargs=chosen.buildargs, labels=labels)


def record_facts(client, plan, emit):
    """Ask the built image's python what its torch build is (build_facts) and label the image with it:
    a build ``FROM`` the image that adds only the label, under the same tag. Return the facts."""
    code, output = client.python_output(plan.tag, build_facts.PROBE)
    where = f"image {plan.name!r} ({plan.tag})"
    if code != 0:
        raise BuildError(f"{where}: asking its torch for its CUDA build failed: {output.strip()[-300:]}")
    facts = build_facts.parse_probe(output, where)
    stream = docker_client.BuildStream()
    labels = {**plan.labels, build_facts.LABEL: facts.to_label()}
    for chunk in client.build(label_context(plan.tag), plan.tag, {}, labels):
        stream.feed(chunk)
    if stream.error:
        raise BuildError(f"{where}: labelling it with its CUDA build failed: {stream.error}")
    emit(plan.name, f"{plan.tag}: {facts.describe()} (label {build_facts.LABEL})")
    return facts


def label_context(tag):
    """A build context whose Dockerfile is only ``FROM tag``: the labels come with the build."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        _add_bytes(tar, "Dockerfile", f"FROM {tag}\n".encode())
    buffer.seek(0)
    return buffer


def _stream_build(client, plan, no_cache, find_links, emit):
    """The build's log lines to ``emit``; with the wheelhouse's URL, on the host's network (the
    URL is on 127.0.0.1) and with FIND_LINKS set to it."""
    stream = docker_client.BuildStream()
    buildargs = {**plan.buildargs, "FIND_LINKS": find_links or ""}
    chunks = client.build(build_context(plan.ca_bundle), plan.tag, buildargs, plan.labels,
                          nocache=no_cache, network_mode="host" if find_links else None)
    for chunk in chunks:
        _emit_progress(plan.name, stream.feed(chunk), emit)
    _emit_progress(plan.name, stream.flush(), emit)
    return stream


def python_version(plan):
    """The image's Python version ("3.10") from its PYTHON build arg; None when unpinned."""
    interpreter = plan.buildargs["PYTHON"]
    return interpreter[len("python"):] if re.fullmatch(r"python3\.\d+", interpreter) else None


def _emit_progress(image_name, lines, emit):
    for line in lines:
        if not _BOOKKEEPING.match(line):
            emit(image_name, line)


def _hint(stream, plan):
    """What to do when the build failed at FROM: the base image is neither local nor pullable."""
    steps = [line for line in stream.tail if line.startswith("Step ")]
    return _base_image_hint(plan) if steps and " : FROM " in steps[-1] else ""


def _base_image_hint(plan):
    return (f"\nthe base image {plan.buildargs['BASE_IMAGE']} is not on this machine and could "
            "not be pulled: pull or load it, or pick another with --base-image (or the "
            "entry's base_image); for the tests, .ci/make-base-images makes them")


def build_context(ca_bundle=None):
    """The build context as an in-memory tar: the Dockerfile and its scripts, runner/, the CA bundle.

    All of them come from the installed packages (matrixbench.resources).
    """
    build_files = resources.docker_build_files()
    runner = resources.runner_dir()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in build_files:
            tar.add(path, arcname=path.name, filter=_readable)
        tar.add(runner, arcname="runner", filter=_source_only)
        _add_bytes(tar, "ca-bundle.crt", Path(ca_bundle).read_bytes() if ca_bundle else b"")
    buffer.seek(0)
    return buffer


def _readable(info):
    """Owned by root and readable by all: the container runs as the host user's uid."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode |= 0o755 if info.isdir() else 0o644
    return info


def _source_only(info):
    return None if _byte_code(info.name.split("/")) else _readable(info)


def _byte_code(parts):
    """A path (its parts) that is Python's byte code, not the runner's source: images get no byte code."""
    return "__pycache__" in parts or parts[-1].endswith((".pyc", ".pyo"))


def _add_bytes(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))

