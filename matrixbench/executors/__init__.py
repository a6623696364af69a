"""Where and when units run: one runner at a time (``sequential``), one per slot at once (``slots``),
or as tasks on a Ray cluster (``ray/``, the only package that imports Ray).

This is the one place that picks by name: ``create_environment`` (what starts each runner, as the
driver sees it: ``--backend``'s environment, or the Ray cluster's driver side) and ``create_executor``;
and the one place that refuses what an executor would ignore (``check_options``). ``run/command.py`` never
tests which executor or backend it got.
"""
from dataclasses import dataclass
from typing import Callable, Dict, Mapping, Optional, Protocol, Tuple

from matrixbench.environments import create_backend
from matrixbench.environments.base import Environment
from matrixbench.errors import OptionConflictError
from matrixbench.executors.base import Executor, Options
from matrixbench.executors.turns import pinned_cores
from matrixbench.matrix import Matrix

EXECUTORS = ("sequential", "slots", "ray")
RAY = "ray"
Note = Callable[[str], None]


def create_environment(options: Options) -> Environment:
    """What starts the runners: ``--backend``'s environment; under --executor ray, the cluster's driver
    side, whose nodes each run ``--backend`` (docker or local)."""
    if options.executor != RAY:
        return create_backend(options.backend, build_options=options.build_options)
    from matrixbench.executors.ray import executor  # imports Ray only when it connects

    return executor.RayBackend(options.ray.address, node_backend=options.backend, registry=options.ray.registry,
                               build_options=options.build_options)


class Factory(Protocol):
    """Makes an executor for a run: its environment (``create_environment``), its options, and the context."""

    def __call__(self, environment: Environment, options: Options, *, matrix: Matrix, gpus: bool,
                 environ: Mapping[str, str], note: Note) -> Executor: ...


def _sequential(environment: Environment, options: Options, *, matrix: Matrix, gpus: bool,
                environ: Mapping[str, str], note: Note) -> Executor:
    from matrixbench.executors.sequential import SequentialExecutor

    return SequentialExecutor()


def _slots(environment: Environment, options: Options, *, matrix: Matrix, gpus: bool, environ: Mapping[str, str],
           note: Note, required: bool = False) -> Executor:
    """Slots where the run has them (``slots`` auto: one per GPU on a GPU run); else one runner at a time."""
    from matrixbench.executors import slots
    from matrixbench.executors.sequential import SequentialExecutor

    slot_plan = slots.plan(matrix, options, gpus, environ, note, required=required)
    return SequentialExecutor() if slot_plan is None else slots.SlotsExecutor(slot_plan)


def _slots_asked(environment: Environment, options: Options, *, matrix: Matrix, gpus: bool,
                 environ: Mapping[str, str], note: Note) -> Executor:
    return _slots(environment, options, matrix=matrix, gpus=gpus, environ=environ, note=note, required=True)


def _ray(environment: Environment, options: Options, *, matrix: Matrix, gpus: bool,
         environ: Mapping[str, str], note: Note) -> Executor:
    from matrixbench.executors.ray import executor

    return executor.RayExecutor(environment)


FACTORIES: Dict[Optional[str], Factory] = {None: _slots, "sequential": _sequential, "slots": _slots_asked, RAY: _ray}


def create_executor(environment: Environment, options: Options, *, matrix: Matrix, gpus: bool,
                    environ: Mapping[str, str], note: Note) -> Executor:
    """``options.executor``'s executor (None: slots where the run has slots, else sequential)."""
    return FACTORIES[options.executor](environment, options, matrix=matrix, gpus=gpus, environ=environ, note=note)


def check_gpu_types(matrix: Matrix, executor: Optional[str]) -> None:
    """The GPU-type axis needs an executor that places work on GPU types: only the ray executor does."""
    if matrix.gpu_types and executor != RAY:
        raise OptionConflictError(
            f"gpu_types {','.join(matrix.gpu_types)}: only --executor ray places work on GPU types (this is "
            f"--executor {executor or 'sequential/slots'}); drop --gpu-types / gpu_types, or run on a Ray cluster "
            "with --executor ray --ray-address HOST:PORT")


def check_turns(matrix: Matrix, executor: Optional[str]) -> None:
    """Runners in turns (matrix setting ``turns``) start a pair at once: on one machine the sequential executor (one
    pair at a time, its blocks on ``pinned_cores``, checked here) and the slots executor (a pair in a slot, on the
    slot's last cores: ``slot_cores``, checked where the slots are planned); on a Ray cluster a unit's task on its
    node (on the last cores of its share of the node: the cluster's nodes are asked as the run starts,
    ``Environment.check_turns_cores``, not this machine's)."""
    if not matrix.turns:
        if matrix.turns_cores:
            raise OptionConflictError(
                f"turns_cores: {matrix.turns_cores} pins the blocks of runners in turns, and this run has none "
                "(turns: false); set turns: true (--set turns=true), or drop turns_cores")
        return
    if executor != RAY:
        pinned_cores(matrix.turns_cores)   # more cores than this run may use: refused before anything is built


@dataclass(frozen=True)
class Scope:
    """Where an option has an effect: ``executors`` that use it (None: a run without --executor); ``given``
    says whether a run sets it. Refusals of options the chosen executor would ignore derive from these."""

    flag: str
    executors: Tuple[Optional[str], ...]
    given: Callable[[Matrix, Options], bool]


ONE_MACHINE: Tuple[Optional[str], ...] = (None, "sequential", "slots")
AT_ONCE: Tuple[Optional[str], ...] = (None, "slots")   # the executors that run several runners at once
SCOPES = (
    # More than one slot runs runners at once: the sequential executor (one at a time) would ignore it. One slot
    # is one runner at a time on one machine, which the sequential executor runs too; slots auto: what the run has.
    Scope("--slots / slots", AT_ONCE, lambda matrix, options: isinstance(matrix.slots, int) and matrix.slots > 1),
    Scope("--slots 1 / slots: 1", ONE_MACHINE, lambda matrix, options: matrix.slots == 1),
    Scope("--calibrate / calibrate", ONE_MACHINE, lambda matrix, options: matrix.calibrate),
    Scope("--exclusive-timing / exclusive_timing", ONE_MACHINE, lambda matrix, options: matrix.exclusive_timing),
    Scope("--gpu", ONE_MACHINE, lambda matrix, options: options.gpu is not None),
    Scope("--allow-busy-gpus", ONE_MACHINE, lambda matrix, options: options.allow_busy_gpus),
    Scope("--ray-address", (RAY,), lambda matrix, options: options.ray.address is not None),
    Scope("registry", (RAY,), lambda matrix, options: options.ray.registry is not None),
    Scope("ca_bundle/index_url/extra_index_urls/base_image", (RAY,),   # (and --backend venv, whose run builds)
          lambda matrix, options: options.build_options is not None and options.backend != "venv"),
)
WHY_NOT = {
    RAY: "not with --executor ray, which places each unit on one GPU Ray assigns, with that GPU's share of its "
         "node's cores; drop them, or run on one machine with --executor slots (docs/cluster.md)",
    "sequential": "not with --executor sequential, which runs one runner at a time (no slots); drop --slots, or "
                  "run several at once with --executor slots",
}


def check_options(matrix: Matrix, options: Options) -> None:
    """Refuse what the chosen executor would ignore (derived from SCOPES): the slot options under --executor
    ray (Ray gives each task one GPU and that GPU's share of its node's cores), more than one slot under
    --executor sequential (one runner at a time), the cluster options without --executor ray."""
    if options.executor not in (None, *EXECUTORS):
        raise OptionConflictError(f"--executor {options.executor!r}: valid are {', '.join(EXECUTORS)}")
    check_gpu_types(matrix, options.executor)
    check_turns(matrix, options.executor)
    ignored = [scope for scope in SCOPES if scope.given(matrix, options) and options.executor not in scope.executors]
    here = [scope for scope in ignored if RAY not in scope.executors]   # an option of another executor on one machine
    if here and options.executor in WHY_NOT:
        raise OptionConflictError(f"{', '.join(scope.flag for scope in here)}: {WHY_NOT[options.executor]}")
    if ignored:
        raise OptionConflictError(f"{', '.join(scope.flag for scope in ignored)}: only with --executor ray (this is "
                                  f"--executor {options.executor or 'sequential/slots'}); drop them, or add "
                                  "--executor ray")
    if options.executor == RAY:
        _check_ray_options(options)


def _check_ray_options(options: Options) -> None:
    """What the ray executor's own options need of --backend (the nodes')."""
    if options.ray.registry and options.backend != "docker":
        raise OptionConflictError(f"registry {options.ray.registry}: images go through a registry only to docker nodes "
                                  f"(this is --backend {options.backend}); drop the registry setting")
    if options.build_options and (options.ray.registry or options.backend != "docker"):
        raise OptionConflictError("ca_bundle, index_url, extra_index_urls, base_image: for the image builds on "
                                  "docker nodes without a registry; drop them")
