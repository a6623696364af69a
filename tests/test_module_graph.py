"""The host package's walls, checked on its import graph (every ``import`` of a matrixbench or runner
module, at module level or inside a function): no circle, no import that climbs back up a layer, and
the third-party walls (click, the docker SDK, Ray, torch) and the runner's contract. ruff's
banned-api (pyproject.toml) says the same at lint time; this test also covers the files ruff exempts."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Layers, top to bottom: a module imports only its own layer or those below it.
LAYERS = (
    ("matrixbench.cli",),
    ("matrixbench.run.command", "matrixbench.run.dry_run", "matrixbench.doctor", "matrixbench.build.clean",
     "matrixbench.build.check", "matrixbench.run.noise_check"),
    ("matrixbench.executors",),
    ("matrixbench.run.launch",),
    ("matrixbench.environments",),
)
# What of the runner the host may import: stdlib-only modules of the host <-> runner contract.
RUNNER_CONTRACT = {"runner", "runner.axes", "runner.core", "runner.schema", "runner.settings", "runner.cells_file",
                   "runner.records", "runner.registry", "runner.timing_board", "runner.machine", "runner.archcheck",
                   "runner.files", "runner.lifetime", "runner.host", "runner.energy", "runner.noise_probe",
                   "runner.baton"}   # its ROLES: the cells file's turns.role (docs/turns.md)
WALLS = {  # third-party package -> where it may be imported
    "click": ("matrixbench.cli",),
    "docker": ("matrixbench.build.docker_client",),
    "ray": ("matrixbench.executors.ray",),
    "torch": (),
}


def _module_name(path):
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path):
    """Every module ``path`` imports (``from a import b`` names a.b when a.b is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            names = (f"{node.module}.{alias.name}" for alias in node.names)
            found |= {name for name in names if _is_module(name)}
    return found


def _is_module(name):
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


GRAPH = {_module_name(path): _imports(path) for path in sorted((ROOT / "matrixbench").rglob("*.py"))}


def _layer(module):
    for index, prefixes in enumerate(LAYERS):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
            return index
    return len(LAYERS)   # the core: matrix, settings, layout, images, ... and report/


def test_no_import_climbs_back_up_a_layer():
    climbs = [f"{module} ({_layer(module)}) imports {target} ({_layer(target)})"
              for module, targets in GRAPH.items() for target in targets
              if target in GRAPH and _layer(target) < _layer(module)]
    assert climbs == []


def test_the_module_graph_has_no_circle():
    edges = {module: {t for t in targets if t in GRAPH and t != module and not module.startswith(t + ".")}
             for module, targets in GRAPH.items()}
    state, path = {}, []

    def visit(module):
        state[module] = "open"
        path.append(module)
        for target in sorted(edges[module]):
            if state.get(target) == "open":
                pytest.fail("import circle: " + " -> ".join(path[path.index(target):] + [target]))
            if target not in state:
                visit(target)
        path.pop()
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module)


def test_third_party_walls_and_the_runner_contract():
    breaches = []
    for module, targets in GRAPH.items():
        for target in targets:
            top = target.split(".")[0]
            if top in WALLS and not any(module == ok or module.startswith(ok + ".") for ok in WALLS[top]):
                breaches.append(f"{module} imports {target}")
            if top == "runner" and target not in RUNNER_CONTRACT:
                breaches.append(f"{module} imports {target}, not of the runner's contract")
    assert breaches == []


def test_the_graph_sees_imports_inside_functions_and_from_imports_of_modules():
    # what the checks above stand on: a lazy import counts, and so does ``from package import module``
    assert "matrixbench.executors.ray.executor" in GRAPH["matrixbench.executors"]      # inside a function
    assert "matrixbench.executors.ray.tasks" in GRAPH["matrixbench.executors.ray.executor"]   # from x import y
    assert _layer("matrixbench.matrix") > _layer("matrixbench.environments.docker") > _layer("matrixbench.cli")
