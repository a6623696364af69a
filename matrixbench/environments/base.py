"""The one small interface every environment shares (``Backend``: docker, venv, local), and what it is
asked: a ``RunRequest`` of four typed parts. ``Environment`` is what a run's driver holds of it (all of it
but ``run``): a Backend, or the Ray cluster's driver side (``executors/ray``), whose nodes run a Backend.

- ``ImageRef``: which image's runner (its name, torch pin, content hash, the build it runs in);
- ``Work``: what the runner is asked (cells, settings, run order, or ``--check``; ``Turns``: with a partner);
- ``Paths``: where its records, compile caches and HF cache are (host paths);
- ``Placement``: where it runs (GPUs, slot, its neighbours, timing board, calibration phase, Ray node).

``executors.base.Run.request`` makes the image, work and paths once per image, unplaced (the run's
GPUs only); an executor narrows it to some repeats (``for_repeats``), pairs it with another image's runner
(``in_turns``) and places it (``placed``); a Ray task moves its folders onto its node (``relocated``). Nothing
else changes a request.
"""
import dataclasses
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    runtime_checkable,
)

from matrixbench.build.facts import BuildFacts
from matrixbench.errors import RunError
from matrixbench.matrix import Image
from matrixbench.run.layout import slot_dir
from matrixbench.run.placement import Slot
from runner.baton import ROLES
from runner.cells_file import schedule_pairs
from runner.core import Cell, Repeat
from runner.records import CALIBRATION_ENV, PLACEMENT_ENV
from runner.timing_board import BOARD_ENV, Board

if TYPE_CHECKING:
    from matrixbench.run.at_once import AtOnce


@dataclass(frozen=True)
class ImageRef:
    """The image a runner runs in: its matrix name, torch requirement (e.g. "torch==2.0.1") and
    content hash (``Image.content_hash()``: a built image must carry it); ``build_of``: an A/A twin's
    original (matrixbench.matrix.aa), whose build it runs in."""

    name: str
    torch: Optional[str] = None
    content_hash: Optional[str] = None
    build_of: Optional[str] = None

    @property
    def built_as(self) -> str:
        """The image name the build (Docker tag, venv) goes by: the twin's original, else its own."""
        return self.build_of or self.name


@dataclass(frozen=True)
class Turns:
    """A runner that takes turns with another image's runner, started at the same time on the same repeats in the
    same order (matrixbench.executors.turns; docs/turns.md): its ``role`` (runner.baton.ROLES: ``first`` starts with
    the turn), the ``partner`` image's name, the pair launch's ``pair_id`` and the host ``folder`` both runners share
    (their batons: ``<folder>/<repeat stem>``), and the CPU ``cores`` both sides' blocks are pinned to (empty: not
    pinned; matrix setting ``turns_cores``)."""

    role: str
    partner: str
    pair_id: str
    folder: Path
    cores: Tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise RunError(f"turns role: must be one of {', '.join(ROLES)}, got {self.role!r} (a bug of the executor "
                           "that paired the runners: matrixbench.executors.turns)")

    def to_dict(self, folder: Optional[str] = None) -> Dict[str, object]:
        """The cells file's ``turns`` object (runner.schema CELLS_SCHEMA 5; ``cores`` only where pinned);
        ``folder``: the shared folder as the runner sees it (a container's mount point), default the host's."""
        data: Dict[str, object] = {"folder": folder or str(self.folder), "role": self.role, "partner": self.partner,
                                   "pair_id": self.pair_id}
        if self.cores:
            data["cores"] = list(self.cores)
        return data


@dataclass(frozen=True)
class Work:
    """What one runner is asked: ``cells`` (runner.core.Cell) with the runner ``settings``
    (iterations, warmup, timeout_s, device, ...), run in ``schedule`` order ([cell index, repeat index]
    pairs, one process each; empty: each cell once, as repeat 0), shuffled with ``order_seed``.
    ``check``: run nothing; the runner builds each cell's model on the meta device (``--check``) and
    writes its answer to <out_dir>/check.json (runner.schema.CHECK_FILENAME), no records. ``probe_s``: run
    nothing either; the runner measures the host's noise for that many seconds on the settings' device
    (``--noise-probe``, runner.noise_probe) and writes <out_dir>/noise_probe.json, no records. ``turns``: its
    cells run in turns with a partner runner (None: alone)."""

    cells: List[Cell]
    settings: Dict[str, object]
    schedule: Tuple[Tuple[int, int], ...] = ()
    order_seed: Optional[int] = None
    check: bool = False
    probe_s: Optional[float] = None   # run no cell: the host-noise probe for this many seconds (noise_probe.json)
    turns: Optional[Turns] = None

    def repeats(self) -> List[Repeat]:
        """The processes to run, in order."""
        if not self.schedule:
            return [Repeat(cell) for cell in self.cells]
        return [Repeat(self.cells[cell], repeat) for cell, repeat in self.schedule]

    def for_repeats(self, repeats: Sequence[Repeat]) -> "Work":
        """This work narrowed to ``repeats`` (a unit's, a round's), in their order."""
        cells, schedule = schedule_pairs(list(repeats))
        return dataclasses.replace(self, cells=cells, schedule=tuple((int(c), int(r)) for c, r in schedule))

    def mode_argv(self) -> List[str]:
        """What the runner's argv gets after ``--cells FILE --out DIR``: ``--check``, ``--noise-probe S`` or
        nothing."""
        if self.probe_s is not None:
            return ["--noise-probe", repr(float(self.probe_s))]
        return ["--check"] if self.check else []

    @property
    def runs_cells(self) -> bool:
        """Whether the runner runs the cells (and writes records): not for --check or --noise-probe."""
        return not self.check and self.probe_s is None


@dataclass(frozen=True)
class Paths:
    """A runner's host folders: ``out_dir`` gets the records (``<cell_id>.json`` for repeat 0,
    ``<cell_id>.r<k>.json``); ``cache_dir`` the compile caches (Inductor/Triton; None: cold);
    ``hf_cache_dir`` the host's HF cache, shared by all images."""

    out_dir: Path
    cache_dir: Optional[Path] = None
    hf_cache_dir: Optional[Path] = None

    def in_slot(self, index: int) -> "Paths":
        """One compile cache per slot: two slots never compile into one folder at once."""
        cache = slot_dir(self.cache_dir, index) if self.cache_dir is not None else None
        return dataclasses.replace(self, cache_dir=cache)


@dataclass(frozen=True)
class Placement:
    """Where a runner runs: ``gpus`` (ask for GPUs at all), ``gpu_ids`` (which; () = all); in a slot
    (its GPU and cores; None: unplaced) of ``slots``, ``busy_units`` of them running a unit when it
    started (itself too), sharing the ``timing_board`` folder (runner.timing_board, host path), timing
    one at a time with ``exclusive_timing``; ``calibration`` ({phase, slots}) for the interference
    calibration's cells; ``node``: a Ray task's node facts (executors/ray/tasks.py)."""

    gpus: bool = False
    gpu_ids: Tuple[str, ...] = ()
    slot: Optional[Slot] = None
    slots: int = 1
    busy_units: int = 1
    timing_board: Optional[Path] = None
    exclusive_timing: bool = False
    calibration: Optional[Dict[str, object]] = None
    node: Dict[str, object] = field(default_factory=dict)

    def slot_env(self, board_dir: Optional[str] = None) -> Dict[str, str]:
        """The slot's environment: threads = its core count, the placement (and calibration phase)
        for the records, and the timing board at ``board_dir`` (the runner's path of
        ``timing_board``: the host path for local runners, the mount point in a container)."""
        if self.slot is None:
            return {}
        threads = str(len(self.slot.cores))
        placement = {**self.slot.to_dict(), "slots": self.slots, "busy_units": self.busy_units, **self.node}
        env = {"OMP_NUM_THREADS": threads, "TORCHINDUCTOR_COMPILE_THREADS": threads,
               PLACEMENT_ENV: json.dumps(placement, sort_keys=True)}
        if self.calibration:
            env[CALIBRATION_ENV] = json.dumps(self.calibration, sort_keys=True)
        if self.timing_board is not None:
            board = Board(board_dir or str(self.timing_board), self.slot.index, self.exclusive_timing)
            env[BOARD_ENV] = board.to_env()
        return env


@dataclass(frozen=True)
class RunRequest:
    """What an environment needs to run one image's runner: the image, the work, the folders, the
    placement, and ``env``: the image's variables and run-time secrets (e.g. HF_TOKEN), kept out of
    repr() so it is never printed."""

    image: ImageRef
    work: Work
    paths: Paths
    placement: Placement = field(default_factory=Placement)
    env: Dict[str, str] = field(default_factory=dict, repr=False)

    def repeats(self) -> List[Repeat]:
        """The processes to run, in order."""
        return self.work.repeats()

    def for_repeats(self, repeats: Sequence[Repeat]) -> "RunRequest":
        """This request narrowed to ``repeats`` (a unit's, a round's), in their order."""
        return dataclasses.replace(self, work=self.work.for_repeats(repeats))

    def in_turns(self, turns: Turns) -> "RunRequest":
        """This request taking turns with another image's runner (``turns``)."""
        return dataclasses.replace(self, work=dataclasses.replace(self.work, turns=turns))

    def placed(self, slot: Slot, *, slots: int, busy_units: int, timing_board: Optional[Path] = None,
               exclusive_timing: bool = False, calibration: Optional[Dict[str, object]] = None,
               node: Optional[Mapping[str, object]] = None, gpu_ids: Optional[Tuple[str, ...]] = None) -> "RunRequest":
        """This request in ``slot`` (an executor's call, the only one that places a request): its
        neighbours, timing board, calibration phase and Ray node as given, its GPUs as asked unless
        ``gpu_ids`` (a Ray task's), and a compile cache of the slot's own (``Paths.in_slot``)."""
        placement = Placement(gpus=self.placement.gpus,
                              gpu_ids=self.placement.gpu_ids if gpu_ids is None else gpu_ids, slot=slot,
                              slots=slots, busy_units=busy_units, timing_board=timing_board,
                              exclusive_timing=exclusive_timing, calibration=calibration, node=dict(node or {}))
        return dataclasses.replace(self, placement=placement, paths=self.paths.in_slot(slot.index))

    def relocated(self, paths: Paths, env: Mapping[str, str]) -> "RunRequest":
        """This request with other folders and run-time env: a Ray task carries it without the driver's
        folders and secrets and moves it onto its node's; the calibration moves it into its own folders."""
        return dataclasses.replace(self, paths=paths, env=dict(env))

    def work_dir(self) -> Path:
        """Where the runner's input file and log go: ``out_dir``, or its ``slot-<i>`` folder in a
        slot (slots may run models of one image at once)."""
        slot = self.placement.slot
        return Path(self.paths.out_dir) if slot is None else slot_dir(self.paths.out_dir, slot.index)


@runtime_checkable
class Starter(Protocol):
    """What starts one image's runner on this machine: ``run(request)``, the runner's exit code (every Backend)."""

    def run(self, request: RunRequest) -> int: ...


class Environment:
    """What starts a run's runners, as the run's driver sees it: a ``Backend`` (docker, venv, local: one
    image's runner on this machine), or the Ray cluster's driver side (``executors/ray``: its nodes each run
    a Backend). ``run.command.run_matrix`` asks it everything below before, around and after the units; the
    defaults are those of an environment with nothing to check, build or stop."""

    name = "base"
    builds_images = False   # docker and venv: one build per image, checked before the run (build_facts)

    def describe(self) -> str:
        """One line for the console: what this backend runs the cells in."""
        return f"{self.name} backend"

    def gpus_available(self) -> bool:
        """Can this backend give the runner NVIDIA GPUs? ``--device cuda`` needs True."""
        return False

    def refuse(self, images: List[Image]) -> None:
        """Refuse, before anything runs (the real run and its dry run alike), images this backend cannot run
        as they ask: raise a RunError naming the image and the fix. Default: none refused."""
        return None

    def installed_versions(self) -> Optional[Dict[str, str]]:
        """The torch and transformers versions every runner of this environment imports, where no image build
        pins them (the local backend: this interpreter's); None where each image's build does (its content hash
        names what it runs, run.resume compares that). A resume compares its records' with these."""
        return None

    def prepare(self, images: List[Image], emit: Optional[Callable[[str, str], None]] = None) -> None:
        """Make ready what the matrix Images need before any cell runs (the venv backend builds
        their venvs); ``emit(image_name, line)`` gets progress lines. Default: nothing to do."""
        return None

    def build_facts(self, image: Image) -> Optional[BuildFacts]:
        """What ``image``'s build (made or checked by ``prepare``) recorded of itself: build_facts.BuildFacts,
        or None when it recorded nothing. Only backends that build images (``builds_images``) answer."""
        return None

    def check_gpu_types(self, gpu_types: Tuple[str, ...]) -> None:
        """Refuse GPU types the backend cannot reach (the ray backend asks its cluster). Only a backend
        that places work on GPU types gets a GPU-type axis (run.check_gpu_types); default: nothing."""
        return None

    def check_turns_cores(self, count: int, gpu_types: Tuple[str, ...], device: str) -> None:
        """Refuse, before anything is written, ``turns_cores`` ``count`` (> 0, with turns) that the cores its
        runners get cannot honour, naming the setting: the ray backend asks its nodes (a unit's task pins within
        its GPU's share of its node's cores, for a run of ``gpu_types`` on ``device``). One machine's cores are
        checked with the options (executors.check_turns); default: nothing."""
        return None

    def runners_at_once(self, gpu_types: Tuple[str, ...], gpus: bool) -> Optional["AtOnce"]:
        """How many runners the run's units run at once, for its bill, where the environment decides it (the ray
        backend asks its cluster's nodes, for a run of ``gpu_types``, on GPUs or not: ``tasks.cluster_at_once``);
        None: the executor's count on this machine (``scheduler.runners_at_once``). Default: None."""
        return None

    def close(self) -> None:
        """Let go of what the backend connected to (the ray backend's cluster). Default: nothing."""
        return None

    def stop_leftovers(self, run_path: Path) -> List[str]:
        """Stop what a killed run (``kill -9``) of the run folder ``run_path`` left running, and
        return one line per thing stopped or left alone, saying why. Called while holding the
        folder's run lock, before anything runs. Default: nothing outlives its run."""
        return []

    def stop_run_leftovers(self, run_id: str) -> List[str]:
        """On a cluster node, before a unit of the run named ``run_id`` runs: stop what a killed run of that name
        left running here (its node-side folders are scratch ones, so ``stop_leftovers`` of the driver's run folder
        cannot find it), one line per thing stopped or left alone. Default: nothing outlives its run."""
        return []

    def stop_all(self) -> None:
        """Stop every runner this backend started that still runs (Ctrl-C with slots: the
        runners of the other threads); their finished records stay. None started: nothing to do."""
        return None


class Backend(Environment, ABC):
    """An environment that runs the runner entrypoint here, for a list of cells, and returns when it exits."""

    @abstractmethod
    def run(self, request: RunRequest) -> int:
        """Run ``request``; block until the runner exits; return its exit code. Slots call it
        from several threads at once.

        Must leave finished records in ``request.paths.out_dir`` even when interrupted
        (KeyboardInterrupt stops and removes whatever the backend started).
        """
