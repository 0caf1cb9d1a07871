"""The coordinator's side of the parameter-server runtime: commands, results, placement.

The coordinator sends commands (``TAG_COMMAND``) to the ps and worker ranks and the cancel of a
batch (``TAG_CANCEL``) to a worker, polls the workers' results (``TAG_RESULT``), and places new
variables in RMA segments, creating a segment (a collective over the job) when none has room.
The messages travel on the control `hpcdist.comm.p2p.Channel`; docs/parameter-server.md has
their content.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from hpcdist.comm.p2p import ANY_SOURCE, Channel
from hpcdist.errors import UnavailableError
from hpcdist.strategies.ps.roles import Roles
from hpcdist.strategies.ps.runtime import TAG_CANCEL, TAG_COMMAND, TAG_RESULT, Runtime, Segments

__all__ = ["CoordinatorRuntime"]


class CoordinatorRuntime(Runtime):
    """The coordinator's runtime: sends commands, receives results, places variables.

    Args:
        strategy: The strategy scheduled functions run under.
        channel: The control channel over every rank of the job.
        roles: Who is who in ``channel``.
        store: This rank's RMA segments.
        allocator: Where variables go in the segments
            (`hpcdist.strategies.ps.store.SegmentAllocator`).
    """

    #: Whether workers may die and join (``hpcdist run --workers``: `membership`).
    fault_tolerant = False

    def __init__(
        self, strategy: Any, channel: Channel, roles: Roles, store: Segments, allocator: Any
    ) -> None:
        super().__init__(strategy, channel, roles, store)
        self.allocator = allocator
        self.send_lock = threading.Lock()
        self.cluster_coordinator: Any = None  # its ClusterCoordinator, once made
        self.lost: dict[int, str] = {}  # stuck worker rank -> its function's name
        #: An error that ends the job (a ps died): raised by every later schedule/join/done.
        self.fatal: BaseException | None = None
        self._uids = itertools.count()
        self._next_ps = 0
        self._shutdown_hooks: list[Callable[[], None]] = []

    # -- messages -----------------------------------------------------------------------------

    def command(self, message: tuple[Any, ...]) -> None:
        """Send a command to every other rank."""
        with self.send_lock:
            for rank in self.roles.others:
                self.channel.send(message, rank, TAG_COMMAND)

    def send_command(self, rank: int, message: tuple[Any, ...]) -> None:
        """Send a command to one rank."""
        with self.send_lock:
            self.channel.send(message, rank, TAG_COMMAND)

    def cancel(self, worker: int) -> None:
        """Tell ``worker`` to give back the items of its batch after the one it runs."""
        with self.send_lock:
            self.channel.send(None, worker, TAG_CANCEL)

    def poll_result(self) -> tuple[int, bytes] | None:
        """``(worker rank, pickled reply)`` that arrived, or None (one thread at a time)."""
        return self.channel.poll(ANY_SOURCE, TAG_RESULT)

    def hung(self, worker: int) -> bool:
        """``worker`` is past its deadline: whether it is ended and replaced (not in one job).

        In a single MPI job a stuck rank cannot be replaced: its function fails with the
        deadline's error and the worker is not used again (`hpcdist.strategies.ps.liveness`).
        """
        del worker
        return False

    def present_workers(self) -> list[int]:
        """The worker ranks connected now: all of them in a single MPI job."""
        return list(self.roles.workers)

    def on_membership_change(self, wake: Callable[[], None]) -> None:
        """``wake()`` is called when a worker joins or dies: never in a single MPI job."""
        del wake

    def membership_pending(self) -> bool:
        """Whether joins or deaths wait for `membership_changes`: never in a single MPI job."""
        return False

    def membership_changes(self) -> list[tuple[str, int]]:
        """Workers that joined or died since the last call: none in a single MPI job.

        (A single job cannot survive a dead rank: the MPI launcher ends it.)
        """
        return []

    # -- variables ----------------------------------------------------------------------------

    def new_uid(self) -> int:
        """A fresh variable identity."""
        return next(self._uids)

    def place(self, nbytes: int) -> tuple[int, int, int]:
        """``(segment, ps, offset)`` for a new variable: ps chosen round-robin."""
        ps = self._next_ps
        self._next_ps = (ps + 1) % len(self.roles.ps)
        placed = self.allocator.place(ps, nbytes)
        if placed is None and self.lost:
            stuck = ", ".join(f"rank {r} in {name}" for r, name in self.lost.items())
            raise UnavailableError(
                f"a new variable of {nbytes} bytes needs a new RMA segment, which every rank "
                f"creates together, but worker(s) {stuck} are stuck past their deadline; "
                "create variables before scheduling functions"
            )
        if placed is None:
            sizes = self.allocator.new_segment_sizes(ps, nbytes)
            self.command(("segment", sizes))
            segment = self.store.create_segment(sizes)
            self.allocator.add_segment(segment, sizes)
            placed = self.allocator.place(ps, nbytes)
            assert placed is not None
        return placed[0], ps, placed[1]

    # -- end of the job -----------------------------------------------------------------------

    def add_shutdown_hook(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` first in `shutdown` (e.g. to finish scheduled work)."""
        self._shutdown_hooks.append(hook)

    def shutdown(self) -> None:
        """Finish scheduled work, release every rank, free the windows."""
        if self.closed:
            return
        for hook in self._shutdown_hooks:
            hook()
        self.command(("stop",))
        self.close()
