"""`Communicator`: hpcdist's collectives on numpy and CuPy arrays (GPU paths: docs/gpus.md).

One `Communicator` per process group, on its own ``Dup()`` of the communicator it is given, so
hpcdist's traffic never mixes with the user's. Every collective:

1. converts its input to a contiguous buffer (`hpcdist.comm.arrays`) and validates the
   arguments locally;
2. checks, across ranks, that everybody called the same collective with the same op, dtype and
   shape (`hpcdist.comm.envelope`; on a single node this rides on the shared-memory barrier,
   across nodes it is one 16-byte all-reduce). Invalid local arguments poison the check, so
   *every* rank raises instead of some ranks waiting forever;
3. moves data with the backend chosen for the message (`hpcdist.comm.selection`);
4. waits under a `Deadline`: past ``timeout_seconds`` the waiting ranks raise
   `DeadlineExceededError` naming the ranks that never joined, and the communicator refuses
   further work (`UnavailableError`), because the abandoned operation may still complete.

Creating one is bounded by the same deadline: the ``Dup()`` that starts it is
`hpcdist.comm.creation.dup`, so that a rank that never joins is named on the others instead of
leaving them in MPI for ever; once every rank has arrived, the rest of the construction (node
layout, splits, windows) runs on ranks that are all there.

Closing, explicitly or at the end of the program, is bounded by the same deadline: the ranks
agree that they are all closing before anything collective is freed.

The collectives' bodies live in `hpcdist.comm.allreduce` and `hpcdist.comm.collectives`;
async handles in `hpcdist.comm.handles`; the end of communicators in `hpcdist.comm.lifetime`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from hpcdist import abort, timeline
from hpcdist.cluster.topology import NodeLayout, node_layout, split_node
from hpcdist.comm import creation, lifetime
from hpcdist.comm.allreduce import NOT_SMALL, AllReduce
from hpcdist.comm.collective_state import CollectiveState
from hpcdist.comm.collectives import Collectives
from hpcdist.comm.envelope import Envelope
from hpcdist.comm.handles import Handle, Runner
from hpcdist.comm.options import CommunicationOptions
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.comm.selection import Backends
from hpcdist.settings import Settings, get_settings

__all__ = ["Communicator", "Handle", "world"]

#: Options the small all-reduce's timeout cache has not seen yet.
_UNSEEN = object()


class Communicator:
    """Collectives over a group of ranks.

    Construction is collective over ``comm`` and bounded by the deadline (``timeout_seconds``
    of ``options``, else ``HPCDIST_TIMEOUT_SECONDS``; `hpcdist.comm.creation`). On more than
    one rank it installs the abort-on-exception hook (`hpcdist.abort`) unless
    ``HPCDIST_ABORT_ON_EXCEPTION=0``.

    Args:
        comm: The process group; ``MPI.COMM_WORLD`` by default. hpcdist works on a ``Dup()``.
        options: Default options of this communicator's collectives.
        settings: Library settings; read from the environment by default.

    Raises:
        DeadlineExceededError: Some ranks of ``comm`` did not join within the deadline (on
            every rank that did; ``missing_ranks`` are their ranks in ``comm``). ``comm`` is
            unusable after it, and the end of the program aborts the job (exit code 18).
    """

    def __init__(
        self,
        comm: MPI.Intracomm | None = None,
        options: CommunicationOptions | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        self.options = options or CommunicationOptions()
        timeline.start_from_environment()
        self._comm: MPI.Intracomm = creation.dup(
            MPI.COMM_WORLD if comm is None else comm,
            "creating hpcdist's communicator",
            self.options.timeout_seconds or self.settings.timeout_seconds,
            self.settings.stall_warning_seconds,
        )
        self.layout: NodeLayout = node_layout(self._comm, self.settings.ranks_per_node)
        self._node_comm = split_node(self._comm, self.settings.ranks_per_node)
        color = 0 if self._node_comm.Get_rank() == 0 else MPI.UNDEFINED
        self._leader_comm = self._comm.Split(color, self._comm.Get_rank())
        self._backends = Backends(
            self._comm, self._node_comm, self._leader_comm, self.layout, self.settings
        )
        self._env = Envelope(
            self._comm,
            self._backends.checker,
            self.settings.check_collectives,
            self.settings.stall_warning_seconds,
        )
        state = CollectiveState(
            self._comm, self.layout, self.settings, self.options, self._env, self._backends
        )
        self._reduce = AllReduce(state)
        self._ops = Collectives(state)
        self._runner = Runner()
        # bound once: the small-message path counts every lookup
        self._fast = self._reduce.fast
        self._opts = state.opts
        self._small = self._reduce.small
        self._small_timeouts = self._reduce.small_timeouts
        self._pending = self._runner.pending
        self._acquire = self._runner.lock.acquire
        self._release = self._runner.lock.release
        self._closed = False
        lifetime.register(self)
        if self.size > 1 and self.settings.abort_on_exception:
            abort.install()  # a rank that dies must not leave the others waiting in a collective

    # -- topology -----------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """Rank of this process."""
        return self.layout.rank

    @property
    def size(self) -> int:
        """Number of ranks."""
        return self.layout.size

    @property
    def local_rank(self) -> int:
        """Rank on this node."""
        return self.layout.local_rank

    @property
    def local_size(self) -> int:
        """Ranks on this node."""
        return self.layout.local_size

    @property
    def node_rank(self) -> int:
        """Index of this node."""
        return self.layout.node_rank

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return self.layout.num_nodes

    @property
    def backends(self) -> Backends:
        """This communicator's backends and the rules that pick one (`available_backends`)."""
        return self._backends

    @property
    def mpi_comm(self) -> MPI.Intracomm:
        """Hpcdist's private duplicate of the communicator (do not use it for your traffic)."""
        return self._comm

    def __repr__(self) -> str:
        return (
            f"Communicator(rank={self.rank}, size={self.size}, local_rank={self.local_rank}, "
            f"local_size={self.local_size}, nodes={self.num_nodes})"
        )

    # -- all-reduce ---------------------------------------------------------------------------

    def allreduce(
        self, x: Any, op: ReduceOp | str = ReduceOp.SUM, options: CommunicationOptions | None = None
    ) -> Any:
        """Reduce ``x`` over all ranks; every rank gets the result (a new array).

        Args:
            x: A numpy array (CuPy and ``__dlpack__`` arrays are accepted).
            op: SUM, MEAN, MIN, MAX or PROD (MEAN of integers rounds down).
            options: Overrides this communicator's options.

        Returns:
            The reduced array, of ``x``'s shape, dtype and array type.

        Raises:
            CollectiveMismatchError: Ranks passed different shapes, dtypes or ops (every rank).
            DeadlineExceededError: Some ranks did not join within the deadline.
            TypeError: An op that the dtype does not support (every rank raises).
        """
        return self._allreduce(x, op, options, False)

    def allreduce_(
        self,
        x: np.ndarray,
        op: ReduceOp | str = ReduceOp.SUM,
        options: CommunicationOptions | None = None,
    ) -> np.ndarray:
        """Reduce ``x`` in place over all ranks and return it."""
        return self._allreduce(x, op, options, True)

    def _allreduce(
        self, x: Any, op: ReduceOp | str, options: CommunicationOptions | None, in_place: bool
    ) -> Any:
        """`allreduce` and `allreduce_`: the small-message fast path, else the general path.

        The fast path (`AllReduce.small`) runs as `Runner.sync` would run it: only with no
        async collective pending (else ``sync`` waits for them first) and no timeline recording
        (``sync`` records), and holding the runner's lock, so that no async collective of
        another thread runs at the same time.
        """
        if (
            self._fast
            and type(x) is np.ndarray
            and not self._pending
            and (not in_place or x.flags.writeable)
            and not timeline.active()
        ):
            timeout = self._small_timeouts.get(options, _UNSEEN)
            if timeout is _UNSEEN:
                timeout = self._reduce.small_timeout(options)
            if timeout is not NOT_SMALL:
                self._acquire()  # not ``with``: half the cost on this path
                try:
                    result = self._small(x, op, timeout, x if in_place else None)
                finally:
                    self._release()
                if result is not None:
                    return result
        return self._runner.sync(self._reduce.allreduce, x, op, options, in_place)

    def allreduce_async(
        self, x: Any, op: ReduceOp | str = ReduceOp.SUM, options: CommunicationOptions | None = None
    ) -> Handle:
        """Start `allreduce`; the handle's ``wait()`` returns the result."""
        return self._runner.start(self._reduce.allreduce, x, op, options, False)

    def allreduce_async_(
        self,
        x: np.ndarray,
        op: ReduceOp | str = ReduceOp.SUM,
        options: CommunicationOptions | None = None,
    ) -> Handle:
        """Start `allreduce_`; ``x`` holds the result once the handle's ``wait()`` returns."""
        return self._runner.start(self._reduce.allreduce, x, op, options, True)

    def grouped_allreduce(
        self,
        xs: Sequence[Any],
        op: ReduceOp | str = ReduceOp.SUM,
        options: CommunicationOptions | None = None,
    ) -> list[Any]:
        """All-reduce a list of arrays in few fused operations (tensor fusion).

        Arrays are packed by dtype into buckets of about ``bytes_per_pack`` bytes (TF's rule),
        one all-reduce per bucket. On one node through shared memory a dtype's arrays are one
        bucket, copied straight into the segment (`hpcdist.comm.fusion`).

        Returns:
            The reduced arrays, in order.
        """
        return self._runner.sync(self._reduce.grouped, xs, op, options)

    def grouped_allreduce_async(
        self,
        xs: Sequence[Any],
        op: ReduceOp | str = ReduceOp.SUM,
        options: CommunicationOptions | None = None,
    ) -> Handle:
        """Start `grouped_allreduce`."""
        return self._runner.start(self._reduce.grouped, xs, op, options)

    def grouped_allreduce_(
        self,
        xs: Sequence[Any],
        op: ReduceOp | str = ReduceOp.SUM,
        options: CommunicationOptions | None = None,
    ) -> list[Any]:
        """`grouped_allreduce` in place: each array of ``xs`` receives its result.

        The arrays must be writeable numpy or CuPy arrays (staged ones get their results copied
        back to the device) that share no memory with one another. On one node through shared
        memory the results go from the segment straight into the arrays, with no pack or result
        buffer.

        Returns:
            ``xs`` (as a list).

        Raises:
            TypeError: An array that cannot be written in place (every rank raises).
            ValueError: Two arrays that share memory (every rank raises).
        """
        return self._runner.sync(self._reduce.grouped, xs, op, options, True)

    def grouped_allreduce_async_(
        self,
        xs: Sequence[Any],
        op: ReduceOp | str = ReduceOp.SUM,
        options: CommunicationOptions | None = None,
    ) -> Handle:
        """Start `grouped_allreduce_`; the arrays hold the results once ``wait()`` returns."""
        return self._runner.start(self._reduce.grouped, xs, op, options, True)

    # -- broadcast, all-gather, reduce-scatter, all-to-all ----------------------------------

    def broadcast(self, x: Any, root: int = 0, options: CommunicationOptions | None = None) -> Any:
        """Return rank ``root``'s ``x`` on every rank (``x`` has the same shape everywhere)."""
        return self._runner.sync(self._ops.broadcast, x, root, options, False)

    def broadcast_(
        self, x: np.ndarray, root: int = 0, options: CommunicationOptions | None = None
    ) -> np.ndarray:
        """Overwrite ``x`` with rank ``root``'s ``x`` and return it."""
        return self._runner.sync(self._ops.broadcast, x, root, options, True)

    def broadcast_async(
        self, x: Any, root: int = 0, options: CommunicationOptions | None = None
    ) -> Handle:
        """Start `broadcast`."""
        return self._runner.start(self._ops.broadcast, x, root, options, False)

    def allgather(self, x: Any, options: CommunicationOptions | None = None) -> Any:
        """Concatenate every rank's ``x`` along the first axis (first dims may differ)."""
        return self._runner.sync(self._ops.allgather, x, options)

    def allgather_async(self, x: Any, options: CommunicationOptions | None = None) -> Handle:
        """Start `allgather`."""
        return self._runner.start(self._ops.allgather, x, options)

    def reduce_scatter(
        self, x: Any, op: ReduceOp | str = ReduceOp.SUM, options: CommunicationOptions | None = None
    ) -> Any:
        """Reduce ``x`` over ranks and return this rank's block of rows.

        Rows are split as evenly as possible: the first ``dim0 % size`` ranks get one extra row.
        """
        return self._runner.sync(self._ops.reduce_scatter, x, op, options)

    def reduce_scatter_async(
        self, x: Any, op: ReduceOp | str = ReduceOp.SUM, options: CommunicationOptions | None = None
    ) -> Handle:
        """Start `reduce_scatter`."""
        return self._runner.start(self._ops.reduce_scatter, x, op, options)

    def alltoall(
        self,
        x: Any,
        splits: Sequence[int] | None = None,
        options: CommunicationOptions | None = None,
    ) -> Any:
        """Send ``splits[i]`` rows of ``x`` to rank ``i``; return the rows received, by source rank.

        Args:
            x: Array whose first axis is split.
            splits: Rows for each rank; default ``dim0 / size`` each.
            options: Overrides this communicator's options.
        """
        return self._runner.sync(self._ops.alltoall, x, splits, options)

    def alltoall_async(
        self,
        x: Any,
        splits: Sequence[int] | None = None,
        options: CommunicationOptions | None = None,
    ) -> Handle:
        """Start `alltoall`."""
        return self._runner.start(self._ops.alltoall, x, splits, options)

    # -- barrier and objects --------------------------------------------------------------------

    def barrier(self, options: CommunicationOptions | None = None) -> None:
        """Wait until every rank has called `barrier`."""
        self._runner.sync(self._ops.barrier, options)

    def allgather_object(self, obj: Any, options: CommunicationOptions | None = None) -> list[Any]:
        """Return the list of every rank's picklable ``obj`` (of any size).

        Raises:
            Exception: This rank's ``obj`` cannot be pickled (the pickling error).
            CollectiveMismatchError: Another rank's cannot (every rank raises).
        """
        return self._runner.sync(self._ops.objects, "allgather_object", obj, 0, options)

    def broadcast_object(
        self, obj: Any, root: int = 0, options: CommunicationOptions | None = None
    ) -> Any:
        """Return rank ``root``'s picklable ``obj`` on every rank.

        Raises:
            Exception: This rank is ``root`` and ``obj`` cannot be pickled (the pickling error).
            CollectiveMismatchError: The root's object cannot be pickled (every other rank).
        """
        return self._runner.sync(self._ops.objects, "broadcast_object", obj, root, options)

    # -- lifetime -------------------------------------------------------------------------------

    def leave(self) -> None:
        """Publish that this rank has reached the end of the program (the exit hook calls it).

        Ranks still waiting in a collective then name this rank as one that left.
        """
        self._env.leave()

    def close(self) -> None:
        """Release windows and communicators (collective). The communicator is unusable after.

        Bounded by the communicator's deadline (``timeout_seconds``): the ranks first agree that
        all of them are closing, and whether any of them failed (then nothing collective is
        freed, since a peer may still be inside the failed operation).

        Raises:
            DeadlineExceededError: Some ranks did not close within the deadline (named).
        """
        if self._closed:
            return
        self._closed = True
        lifetime.unregister(self)
        self._runner.close()
        if not self._env.agree_to_close(self._opts(None).timeout):
            self._env.broken = "closed"
            return
        self._env.close()
        self._backends.close()
        for comm in (self._leader_comm, self._node_comm, self._comm):
            if comm != MPI.COMM_NULL:
                comm.Free()


def world() -> Communicator:
    """Return hpcdist's world communicator (created on first call; collective then).

    The first call is bounded by ``HPCDIST_TIMEOUT_SECONDS``: when some ranks never call it,
    the others raise `DeadlineExceededError` naming them (see `Communicator`).

    Like every `Communicator` on more than one rank, it installs the abort-on-exception hook
    (see `hpcdist.abort`) unless ``HPCDIST_ABORT_ON_EXCEPTION=0``. It lives until
    `Communicator.close` or the end of the program (`hpcdist.comm.lifetime`).
    """
    return lifetime.shared(Communicator)
