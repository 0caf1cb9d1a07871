"""The contract every backend implements (MPI, SHM, RING, hierarchical, NCCL, CUDA-aware MPI).

The `Communicator` front validates arguments, converts dtypes to what the backend reduces,
finishes MEAN (a SUM followed by `mean_from_sum`) and wraps all-reduces in compression
(`CompressedBackend`), then hands contiguous 1-D buffers to a backend. A backend says what it
supports through attributes, which the front reads instead of probing for methods:

- ``collectives``: the collectives it carries itself; it implements the others too, by
  delegating to an MPI backend over the same group (``fallback``), so every backend implements
  the whole contract;
- ``devices``: where its buffers live, ``"host"`` (numpy) and/or ``"gpu"`` (CuPy);
- ``dtypes``: the numpy dtype characters its ``allreduce`` and ``reduce_scatter`` reduce as
  they are (the front converts the others: bool to uint8, float16 to float32, ...);
- ``in_place``: whether ``allreduce`` accepts ``src is dst``;
- ``compression``: the 16-bit wire formats (``"fp16"``, ``"bf16"``) its ``allreduce`` reduces
  when given the format's `Codec`.

One conformance test (``tests/mpi/test_backend_conformance.py``) runs the whole contract against
every backend of `hpcdist.comm.registry.available_backends`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from hpcdist.comm.checks import Header
from hpcdist.comm.deadline import Deadline
from hpcdist.comm.reduce_op import ReduceOp

if TYPE_CHECKING:
    from hpcdist.comm.compression import Codec

__all__ = ["COLLECTIVES", "HOST_DTYPES", "Backend", "DelegatingBackend", "unsupported_codec"]

#: Every collective of the contract.
COLLECTIVES = frozenset(
    {"allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "barrier"}
)

#: dtype characters the MPI library reduces (it has no float16 and no bool arithmetic).
HOST_DTYPES = frozenset("bBhHiIlLqQfdgFDG")


@runtime_checkable
class Backend(Protocol):
    """An implementation of the data-moving collectives.

    Buffers are contiguous 1-D arrays; ``counts`` are element counts per rank, equal on every
    rank (the front exchanges them first). ``op`` is never MEAN. When ``header`` is not None the
    backend verifies it across ranks first and raises `CollectiveMismatchError` on every rank if
    they differ. Every wait goes through ``deadline``.
    """

    name: str
    collectives: frozenset[str]
    devices: frozenset[str]
    dtypes: frozenset[str]
    in_place: bool
    compression: frozenset[str]

    def allreduce(
        self,
        src: Any,
        dst: Any,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
        codec: Codec | None = None,
    ) -> None:
        """Reduce ``src`` over all ranks into ``dst`` (``src is dst`` means in place).

        With ``codec`` (one of ``compression``) the buffers hold that format's 16-bit words.
        """

    def broadcast(self, buf: Any, root: int, header: Header | None, deadline: Deadline) -> None:
        """Copy ``buf`` of rank ``root`` into ``buf`` on every rank."""

    def allgather(
        self, src: Any, dst: Any, counts: Sequence[int], header: Header | None, deadline: Deadline
    ) -> None:
        """Concatenate every rank's ``src`` (``counts[r]`` elements on rank ``r``) into ``dst``."""

    def reduce_scatter(
        self,
        src: Any,
        dst: Any,
        counts: Sequence[int],
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """Reduce ``src`` (``sum(counts)`` elements) and keep this rank's block in ``dst``."""

    def alltoall(
        self,
        src: Any,
        dst: Any,
        send_counts: Sequence[int],
        recv_counts: Sequence[int],
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """Send ``send_counts[r]`` elements of ``src`` to rank ``r``; receive into ``dst``."""

    def barrier(self, header: Header | None, deadline: Deadline) -> None:
        """Wait until every rank arrives (verifying ``header`` when given)."""

    def close(self) -> None:
        """Release the backend's resources (collective)."""


class DelegatingBackend:
    """Base of backends that carry only some collectives: the others go to ``fallback``.

    Subclasses set ``fallback`` (a backend over the same group of ranks that carries every
    collective, usually `MpiBackend`) and override the collectives they carry.
    """

    name = "delegating"
    collectives: frozenset[str] = frozenset()
    devices: frozenset[str] = frozenset({"host"})
    dtypes: frozenset[str] = frozenset()
    in_place = True
    compression: frozenset[str] = frozenset()
    fallback: Backend

    def allreduce(
        self,
        src: Any,
        dst: Any,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
        codec: Codec | None = None,
    ) -> None:
        """Delegate to ``fallback``."""
        self.fallback.allreduce(src, dst, op, header, deadline, codec)

    def broadcast(self, buf: Any, root: int, header: Header | None, deadline: Deadline) -> None:
        """Delegate to ``fallback``."""
        self.fallback.broadcast(buf, root, header, deadline)

    def allgather(
        self, src: Any, dst: Any, counts: Sequence[int], header: Header | None, deadline: Deadline
    ) -> None:
        """Delegate to ``fallback``."""
        self.fallback.allgather(src, dst, counts, header, deadline)

    def reduce_scatter(
        self,
        src: Any,
        dst: Any,
        counts: Sequence[int],
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """Delegate to ``fallback``."""
        self.fallback.reduce_scatter(src, dst, counts, op, header, deadline)

    def alltoall(
        self,
        src: Any,
        dst: Any,
        send_counts: Sequence[int],
        recv_counts: Sequence[int],
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """Delegate to ``fallback``."""
        self.fallback.alltoall(src, dst, send_counts, recv_counts, header, deadline)

    def barrier(self, header: Header | None, deadline: Deadline) -> None:
        """Delegate to ``fallback``."""
        self.fallback.barrier(header, deadline)

    def close(self) -> None:
        """Nothing to release by default."""


def unsupported_codec(backend: Backend, codec: Codec | None) -> None:
    """Raise `TypeError` when ``backend`` cannot reduce ``codec``'s wire format."""
    if codec is not None and codec.name not in backend.compression:
        raise TypeError(
            f"the {backend.name} backend cannot reduce {codec.name} words; it reduces "
            f"{sorted(backend.compression) or 'no 16-bit wire format'}"
        )
