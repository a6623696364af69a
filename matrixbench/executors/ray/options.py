"""The ray executor's own options: which cluster, and how its docker nodes get their images.

Only the ray executor reads them (``executors.create_environment`` hands them to the driver side);
``RunOptions.ray`` carries them, empty unless the run is given ``--ray-address`` or a ``registry``, and
``executors.check_options`` refuses them under any other executor. Plain data: no Ray import here.
"""
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class RayOptions:
    address: Optional[str] = None    # --ray-address HOST:PORT (None: a cluster on this node)
    registry: Optional[str] = None   # docker nodes: the driver pushes images to HOST:PORT, the nodes pull them
