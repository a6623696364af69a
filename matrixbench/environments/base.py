"""The one small interface every backend shares (docker, local, later others)."""
import dataclasses
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from matrixbench.layout import slot_dir
from matrixbench.placement import Slot
from runner.cells_file import schedule_pairs
from runner.core import Cell, Repeat
from runner.records import CALIBRATION_ENV, PLACEMENT_ENV
from runner.timing_board import BOARD_ENV, Board


@dataclass(frozen=True)
class RunRequest:
    """What a backend needs to run one image's pending cells.

    ``cells`` are the cells to run (runner.core.Cell); ``settings`` are
    the runner settings (iterations, warmup, timeout_s, device, accuracy_tolerance,
    cv_threshold). ``schedule`` is the run order, [cell index, repeat index] pairs, one process
    each (empty: each cell once, as repeat 0). Records land in ``out_dir`` as ``<cell_id>.json``
    (repeat 0) and ``<cell_id>.r<k>.json``.
    """

    image_name: str
    cells: List[Cell]
    settings: Dict[str, Any]
    out_dir: Path
    cache_dir: Optional[Path] = None      # compile caches (Inductor/Triton); None = cold
    hf_cache_dir: Optional[Path] = None   # the host's HF cache, shared by all images
    gpus: bool = False                    # ask for all GPUs (--gpus all)
    # run-time only env, e.g. HF_TOKEN: kept out of repr() so it is never printed
    env: Dict[str, str] = field(default_factory=dict, repr=False)
    torch: Optional[str] = None           # the image entry's torch requirement, e.g. "torch==2.0.1"
    image_hash: Optional[str] = None      # the image entry's content_hash(): a built image must carry it
    gpu_ids: Tuple[str, ...] = ()         # the GPUs to use (indices or UUIDs); () = all
    schedule: Tuple[Tuple[int, int], ...] = ()   # (cell index, repeat index) in run order; () = each cell once
    order_seed: Optional[int] = None      # the seed the order was shuffled with (recorded)
    build_of: Optional[str] = None        # an A/A twin's original (matrixbench.aa): its build runs this one

    @property
    def built_as(self) -> str:
        """The image name the build (Docker tag, venv) goes by: the twin's original, else its own."""
        return self.build_of or self.image_name

    def repeats(self) -> List[Repeat]:
        """The processes to run, in order."""
        if not self.schedule:
            return [Repeat(cell) for cell in self.cells]
        return [Repeat(self.cells[cell], repeat) for cell, repeat in self.schedule]

    def for_repeats(self, repeats: Sequence[Repeat]) -> "RunRequest":
        """This request narrowed to ``repeats`` (a unit's, a round's), in their order."""
        cells, schedule = schedule_pairs(list(repeats))
        return dataclasses.replace(self, cells=cells, schedule=tuple((int(c), int(r)) for c, r in schedule))

    slot: Optional[Slot] = None           # the slot it runs in (its GPU and cores); None: unplaced
    slots: int = 1                        # slots of the run
    busy_units: int = 1                   # slots running a unit when this one started (itself too)
    timing_board: Optional[Path] = None   # the run's timing board folder (runner.timing_board), host path
    exclusive_timing: bool = False        # slots time one at a time (--exclusive-timing)
    calibration: Optional[Dict[str, Any]] = None   # {phase, slots}: cells of the interference calibration
    node: Dict[str, Any] = field(default_factory=dict)   # a Ray task's node (executors/ray/tasks.py), for placement
    # run nothing: the runner builds each cell's model on the meta device (``--check``) and
    # writes its answer to <out_dir>/check.json (runner.schema.CHECK_FILENAME); no records
    check: bool = False

    def mode_argv(self) -> List[str]:
        """What the runner's argv gets after ``--cells FILE --out DIR``: ``--check`` or nothing."""
        return ["--check"] if self.check else []

    def work_dir(self) -> Path:
        """Where the runner's input file and log go: ``out_dir``, or its ``slot-<i>`` folder in a
        slot (slots may run models of one image at once)."""
        return Path(self.out_dir) if self.slot is None else slot_dir(self.out_dir, self.slot.index)

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


class Backend(ABC):
    """Runs the runner entrypoint for a list of cells and returns when it exits."""

    name = "base"
    builds_images = False   # docker and venv: one build per image, checked before the run (build_facts)

    def describe(self) -> str:
        """One line for the console: what this backend runs the cells in."""
        return f"{self.name} backend"

    def gpus_available(self) -> bool:
        """Can this backend give the runner NVIDIA GPUs? ``--device cuda`` needs True."""
        return False

    def prepare(self, images: List[Any], emit: Optional[Callable[[str, str], None]] = None) -> None:
        """Make ready what the matrix Images need before any cell runs (the venv backend builds
        their venvs); ``emit(image_name, line)`` gets progress lines. Default: nothing to do."""
        return None

    def build_facts(self, image: Any) -> Optional[Any]:
        """What ``image``'s build (made or checked by ``prepare``) recorded of itself: build_facts.BuildFacts,
        or None when it recorded nothing. Only backends that build images (``builds_images``) answer."""
        return None

    @abstractmethod
    def run(self, request: RunRequest) -> int:
        """Run ``request``; block until the runner exits; return its exit code. Slots call it
        from several threads at once.

        Must leave finished records in ``request.out_dir`` even when interrupted
        (KeyboardInterrupt stops and removes whatever the backend started).
        """

    def check_gpu_types(self, gpu_types: Tuple[str, ...]) -> None:
        """Refuse GPU types the backend cannot reach (the ray backend asks its cluster). Only a backend
        that places work on GPU types gets a GPU-type axis (run.check_gpu_types); default: nothing."""
        return None

    def close(self) -> None:
        """Let go of what the backend connected to (the ray backend's cluster). Default: nothing."""
        return None

    def stop_leftovers(self, run_path: Path) -> List[str]:
        """Stop what a killed run (``kill -9``) of the run folder ``run_path`` left running, and
        return one line per thing stopped or left alone, saying why. Called while holding the
        folder's run lock, before anything runs. Default: nothing outlives its run."""
        return []

    def stop_all(self) -> None:
        """Stop every runner this backend started that still runs (Ctrl-C with slots: the
        runners of the other threads); their finished records stay. None started: nothing to do."""
        return None
