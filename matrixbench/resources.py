"""The files matrixbench ships, found with importlib.resources.

The report templates (``templates/``) and the Docker build files (``images/``) live at the top of a
checkout, beside ``runner/``; the wheel carries them inside the package as ``matrixbench/_shipped/``
(pyproject.toml's hatch ``force-include``). ``shipped_dir`` looks there first, then beside the package
in a checkout (a folder holding pyproject.toml). The published tables the report compares with
(matrixbench/data/) and the in-container runner (the ``runner`` package, copied into every image) come
from wherever Python imports them: a source checkout, an editable install or an installed wheel alike.
"""
from importlib import resources
from pathlib import Path

from matrixbench.errors import BuildError, MatrixbenchError, ReportError

TEMPLATES = "templates"
DATA = "data"
PUBLISHED_SEED = "perf_torch_compile.md"           # the vendored seed page
PUBLISHED_DATASET = "published_torch_compile.csv"  # its tables, one row per number (tools/regenerate_published.py)
IMAGES = "images"
SHIPPED = "_shipped"                               # the wheel's folder of templates/ and images/
DOCKER_BUILD_FILES = ("Dockerfile", "ensure-toolchain.sh", "pip-install.sh")


def templates_dir() -> Path:
    """The folder of the report's Jinja templates."""
    return shipped_dir(TEMPLATES, error=ReportError)


def published_seed() -> Path:
    """The vendored seed page whose tables the published dataset is parsed from."""
    return data_file(PUBLISHED_SEED)


def published_dataset() -> Path:
    """The published numbers as a CSV, one row per number."""
    return data_file(PUBLISHED_DATASET)


def data_file(name: str) -> Path:
    """A file of matrixbench/data/; ReportError when the install lacks it."""
    path = package_dir("matrixbench", DATA, error=ReportError) / name
    if not path.is_file():
        raise ReportError(f"{_broken_install('matrixbench')}: {path} missing")
    return path


def docker_build_files() -> list[Path]:
    """The Dockerfile and its helper scripts, in DOCKER_BUILD_FILES order."""
    folder = shipped_dir(IMAGES, error=BuildError)
    paths = [folder / name for name in DOCKER_BUILD_FILES]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise BuildError(f"{_broken_install('matrixbench')}: {', '.join(missing)} missing")
    return paths


def docker_build_file(name: str) -> Path:
    """One of DOCKER_BUILD_FILES (the venv backend runs pip-install.sh on the host too)."""
    (path,) = [path for path in docker_build_files() if path.name == name]
    return path


def runner_dir(error: type[MatrixbenchError] = BuildError) -> Path:
    """The folder of the ``runner`` package: what images get as /opt/matrixbench/runner."""
    return package_dir("runner", error=error)


def shipped_dir(name: str, error: type[MatrixbenchError]) -> Path:
    """The top-level folder ``name`` (templates, images): the wheel's copy, else a checkout's."""
    package = package_dir("matrixbench", error=error)
    wheel, checkout = package / SHIPPED / name, package.parent / name
    if wheel.is_dir():
        return wheel
    if (package.parent / "pyproject.toml").is_file() and checkout.is_dir():
        return checkout
    raise error(f"{_broken_install('matrixbench')}: {name}/ is in neither {wheel} nor the checkout {checkout}")


def package_dir(package: str, *parts: str, error: type[MatrixbenchError]) -> Path:
    """``parts`` under an importable package, as a folder on disk; ``error`` when it is not one."""
    try:
        folder = resources.files(package)
    except ModuleNotFoundError as missing:
        raise error(f"{_broken_install(package)}: {missing}") from None
    for part in parts:
        folder = folder / part
    if not isinstance(folder, Path) or not folder.is_dir():
        raise error(f"{_broken_install(package)}: {'/'.join((package, *parts))} is not a folder ({folder})")
    return folder


def _broken_install(package: str) -> str:
    return (f"the installed {package} package lacks files it ships; reinstall matrixbench "
            "(pip install --force-reinstall matrixbench, or pip install -e . in a checkout)")
