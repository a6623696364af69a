"""The runner's input file (``python -m runner --cells FILE``), written from a RunRequest
(``matrixbench.environments.base``, a layer above: seen here as ``Request``, the parts it reads).

The backend that runs an image writes it once, into the image's output folder as ``cells.json``
(the docker backend with the image's id and the cells' in-container paths), so the folder says
what was asked of the runner last time, next to the records it wrote. Its ``schema_version``
(runner.schema.CELLS_SCHEMA_VERSION, schema CELLS_SCHEMA) is checked by the runner.
"""
from pathlib import Path
from typing import Dict, Mapping, Optional, Protocol, Sequence, Tuple, Union

from matrixbench.redact import redact_data
from matrixbench.run.layout import CELLS_FILENAME
from runner.core import Cell
from runner.schema import CELLS_SCHEMA_VERSION, write_json_atomic


class _Image(Protocol):
    @property
    def name(self) -> str: ...


class _Turns(Protocol):
    def to_dict(self, folder: Optional[str] = None) -> Dict[str, object]: ...


class _Work(Protocol):
    @property
    def settings(self) -> Mapping[str, object]: ...

    @property
    def cells(self) -> Sequence[Cell]: ...

    @property
    def order_seed(self) -> Optional[int]: ...

    @property
    def schedule(self) -> Sequence[Tuple[int, int]]: ...

    @property
    def turns(self) -> Optional[_Turns]: ...


class _Paths(Protocol):
    @property
    def out_dir(self) -> Path: ...


class Request(Protocol):
    """What the runner's input is written from: an environments.base.RunRequest."""

    @property
    def image(self) -> _Image: ...

    @property
    def work(self) -> _Work: ...

    @property
    def paths(self) -> _Paths: ...


def runner_input(request: Request, image_id: Optional[str] = None,
                 cells: Optional[Sequence[Cell]] = None, turns_folder: Optional[str] = None) -> Dict[str, object]:
    """The runner's cells document: settings, image name and id, the cells (``cells``: as the runner
    sees them, in the request's order, e.g. at a container's mounts; default the request's), the
    run order (``repeats``: [cell index, repeat index] pairs) with the seed it was shuffled with, and, for a
    runner in turns, ``turns`` ({folder, role, partner, pair_id}; ``turns_folder``: the shared folder as the runner
    sees it, e.g. a container's mount point; default the host's)."""
    document: Dict[str, object] = {
        "schema_version": CELLS_SCHEMA_VERSION,
        "settings": dict(request.work.settings),
        "image_name": request.image.name,
        "image_id": image_id,
        "cells": [cell.to_dict() for cell in (request.work.cells if cells is None else cells)],
    }
    if request.work.order_seed is not None:
        document["order_seed"] = request.work.order_seed
    if request.work.schedule:
        document["repeats"] = [[cell, repeat] for cell, repeat in request.work.schedule]
    if request.work.turns is not None:
        document["turns"] = request.work.turns.to_dict(turns_folder)
    return document


def write_cells_file(request: Request, image_id: Optional[str] = None, path: Optional[Union[str, Path]] = None,
                     cells: Optional[Sequence[Cell]] = None, turns_folder: Optional[str] = None) -> Path:
    """Write the runner's input (``runner_input``) atomically (sorted keys), its secrets hidden; return its path."""
    path = Path(path) if path is not None else Path(request.paths.out_dir) / CELLS_FILENAME
    return write_json_atomic(path, redact_data(runner_input(request, image_id, cells, turns_folder)))
