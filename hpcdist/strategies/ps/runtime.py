"""The parameter-server runtime of one process: what every rank holds, and where to find it.

A `ParameterServerStrategy` job has one **coordinator** (it runs the user's program), **ps**
ranks (they expose the variables' memory) and **workers** (they run scheduled functions). Every
rank holds one runtime: the coordinator a `hpcdist.strategies.ps.control.CoordinatorRuntime`
(commands, results, placement of variables), ps and worker ranks a
`hpcdist.strategies.ps.serving.ServingRuntime` (the serve loop, scheduled functions and their
caches). Both are a `Runtime`: the control channel (a `hpcdist.comm.p2p.Channel`), the RMA
segments (`Segments`) and the variables known to the rank.

Messages on the control channel, in full in docs/parameter-server.md: ``TAG_COMMAND``
(``("segment", sizes)``, ``("batch", items)``, ``("run", *item)``, ``("stop",)``); ``TAG_RESULT``,
a batch's ``(results, given_back)``, sent at its end or, when an item runs past `WATCH_SECONDS`,
by a thread that gives back the items after it; ``TAG_CANCEL``: give back the rest of a batch.
The tags are reserved in `hpcdist.comm.p2p`. `serve`, the loop of a ps or worker rank, answers
commands until ``stop`` and returns.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol, cast

from hpcdist import timeline
from hpcdist.comm.p2p import TAG_PS_CANCEL, TAG_PS_COMMAND, TAG_PS_RESULT, Channel
from hpcdist.strategies.ps.roles import Roles

if TYPE_CHECKING:
    from hpcdist.strategies.ps.control import CoordinatorRuntime
    from hpcdist.strategies.ps.serving import ServingRuntime

__all__ = [
    "SPIN_SECONDS",
    "TAG_CANCEL",
    "TAG_COMMAND",
    "TAG_RESULT",
    "WATCH_SECONDS",
    "Runtime",
    "Segments",
    "coordinator_only",
    "coordinator_runtime",
    "creating_dataset",
    "has_runtime",
    "install_runtime",
    "is_creating_dataset",
    "runtime",
    "serve",
    "serving_runtime",
]

TAG_COMMAND = TAG_PS_COMMAND
TAG_RESULT = TAG_PS_RESULT
TAG_CANCEL = TAG_PS_CANCEL
#: A worker whose batch item runs longer than this sends the results the batch has so far.
WATCH_SECONDS = 0.05
#: How long a ps or worker rank keeps probing for the next command without sleeping.
SPIN_SECONDS = 5e-4

_runtime: Runtime | None = None
_creating = threading.local()


class Segments(Protocol):
    """What the runtime needs of the RMA segments (`hpcdist.strategies.ps.store.RmaStore`)."""

    channel: Channel

    def create_segment(self, sizes: list[int]) -> int:
        """Collective: a new segment where ps ``i`` exposes ``sizes[i]`` bytes; its index."""
        ...

    def free(self) -> None:
        """Collective: release every segment."""
        ...


class Runtime:
    """What every rank of a parameter-server job holds: channel, roles, segments, variables.

    Args:
        strategy: The strategy scheduled functions run under, and the one unpickled ones get.
        channel: The control channel over every rank of the job (freed when the job ends).
        roles: Who is who in ``channel``.
        store: This rank's RMA segments over a channel of their own (freed with it).
        rank: This process's rank in ``roles``; by default its rank in ``channel`` (a worker
            of a fault-tolerant job has rank 0 on its side of its channel, and the rank it
            would have in one job here).
    """

    def __init__(
        self,
        strategy: Any,
        channel: Channel,
        roles: Roles,
        store: Segments,
        rank: int | None = None,
    ) -> None:
        self.strategy, self.roles, self.channel, self.store = strategy, roles, channel, store
        self.rank = channel.rank if rank is None else rank
        self.is_coordinator = self.rank == roles.coordinator
        self.variables: dict[int, Any] = {}  # uid -> variable (workers: rebuilt ones)
        self.closed = False

    def close(self) -> None:
        """Free the windows and channels of this rank (collective over the job)."""
        self.closed = True
        self.store.free()
        self.store.channel.free()
        self.channel.free()


def runtime() -> Runtime:
    """This process's parameter-server runtime.

    Raises:
        RuntimeError: No `ParameterServerStrategy` was created in this process.
    """
    if _runtime is None:
        raise RuntimeError("no ParameterServerStrategy was created in this process")
    return _runtime


def coordinator_runtime() -> CoordinatorRuntime:
    """This process's runtime, which must be the coordinator's.

    Raises:
        RuntimeError: No runtime, or this process is a ps or worker rank.
    """
    rt = runtime()
    if not rt.is_coordinator:
        raise RuntimeError(
            f"rank {rt.rank} is a ps or worker rank: expected the coordinator's runtime"
        )
    return cast("CoordinatorRuntime", rt)


def serving_runtime() -> ServingRuntime:
    """This process's runtime, which must be a ps or worker rank's.

    Raises:
        RuntimeError: No runtime, or this process is the coordinator.
    """
    rt = runtime()
    if rt.is_coordinator:
        raise RuntimeError(f"rank {rt.rank} is the coordinator: expected a ps or worker rank")
    return cast("ServingRuntime", rt)


def coordinator_only() -> bool:
    """Whether this process is a parameter-server job's coordinator (no collectives allowed)."""
    return _runtime is not None and _runtime.is_coordinator


def has_runtime() -> bool:
    """Whether this process created a `ParameterServerStrategy` (and so has a runtime)."""
    return _runtime is not None


def install_runtime(rt: Runtime) -> Runtime:
    """Make ``rt`` this process's runtime (once per process); `runtime` returns it.

    Raises:
        RuntimeError: This process already has a runtime.
    """
    global _runtime
    if _runtime is not None:
        raise RuntimeError("a job can create one ParameterServerStrategy")
    timeline.start_from_environment()
    _runtime = rt
    return rt


def serve(rt: Any = None) -> None:
    """Run the coordinator's commands on this ps or worker rank until it stops the job.

    See `hpcdist.strategies.ps.serving.ServingRuntime.serve`.

    Args:
        rt: The `ServingRuntime` to serve; by default this process's (`serving_runtime`).

    Raises:
        RuntimeError: ``rt`` is already closed.
    """
    (serving_runtime() if rt is None else rt).serve()


@contextlib.contextmanager
def creating_dataset() -> Iterator[None]:
    """Mark this thread as running a ``dataset_fn`` (where creating variables is an error)."""
    previous = getattr(_creating, "dataset_fn", False)
    _creating.dataset_fn = True
    try:
        yield
    finally:
        _creating.dataset_fn = previous


def is_creating_dataset() -> bool:
    """Whether this thread is inside `creating_dataset`."""
    return getattr(_creating, "dataset_fn", False)
