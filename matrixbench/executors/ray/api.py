"""What matrixbench calls of Ray, as Protocols (``Api``): Ray is typed but huge, so mypy skips it and a plain
``import ray`` is untyped; the executor uses a small part of it: connecting, the cluster's nodes and
resources, remote functions and one actor, and waiting for, fetching and cancelling what they return.

``ray_api()`` imports Ray (only when a function of the executor runs) as an ``Api``. The types exist for
mypy alone (``ParamSpec`` is Python 3.10's): modules name them in annotations under
``from __future__ import annotations``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from matrixbench.errors import RunError

if TYPE_CHECKING:
    from typing import (
        Callable,
        Dict,
        Generic,
        List,
        Optional,
        ParamSpec,
        Protocol,
        Sequence,
        Tuple,
        Type,
        TypedDict,
        TypeVar,
    )

    T = TypeVar("T")
    T_co = TypeVar("T_co", covariant=True)
    P = ParamSpec("P")

    class Ref(Generic[T_co]):
        """An ObjectRef: what a remote call will return (``Api.get``); only Ray makes one."""

    class Remote(Protocol[P, T_co]):
        """An actor's method (or a remote function): ``remote(...)`` submits a call."""

        def remote(self, *args: P.args, **kwargs: P.kwargs) -> Ref[T_co]: ...

    class RemoteFunction(Remote[P, T_co], Protocol[P, T_co]):
        """``ray.remote(function)``."""

        def options(self, **options: object) -> RemoteFunction[P, T_co]: ...

    class RuntimeContext(Protocol):
        def get_node_id(self) -> str: ...

    class Util(Protocol):
        def get_node_ip_address(self) -> str: ...

    class Exceptions(Protocol):
        """Ray's exceptions the executor tells apart."""

        @property
        def RayError(self) -> Type[Exception]: ...

        @property
        def RayTaskError(self) -> Type[Exception]: ...

        @property
        def TaskCancelledError(self) -> Type[Exception]: ...

        @property
        def AuthenticationError(self) -> Type[Exception]: ...

    class NodeInfo(TypedDict):
        """What ``ray.nodes()`` says of a node (the keys read here)."""

        NodeID: str
        Alive: bool
        NodeManagerAddress: str
        Resources: Dict[str, float]

    class Api(Protocol):
        """The ``ray`` module, as far as matrixbench calls it."""

        @property
        def exceptions(self) -> Exceptions: ...

        @property
        def util(self) -> Util: ...

        def is_initialized(self) -> bool: ...

        def init(self, *, address: str, namespace: str, log_to_driver: bool, logging_level: int) -> object: ...

        def shutdown(self) -> None: ...

        def cluster_resources(self) -> Dict[str, float]: ...

        def nodes(self) -> List[NodeInfo]: ...

        def get_runtime_context(self) -> RuntimeContext: ...

        def get_gpu_ids(self) -> List[object]: ...

        def remote(self, target: Callable[P, T]) -> RemoteFunction[P, T]: ...

        def get(self, ref: Ref[T]) -> T: ...

        def wait(self, refs: Sequence[Ref[T]], *, num_returns: int,
                 timeout: Optional[float]) -> Tuple[List[Ref[T]], List[Ref[T]]]: ...

        def cancel(self, ref: Ref[T], *, force: bool = False) -> None: ...


def ray_api() -> Api:
    """The ``ray`` module; a RunError saying how to install it where it is missing."""
    try:
        import ray
    except ImportError as exc:
        raise RunError(f"--executor ray needs Ray on the driver and on every node: pip install 'matrixbench[ray]' "
                       f"({exc})") from exc
    api: Api = ray
    return api
