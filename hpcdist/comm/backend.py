"""The contract every all-reduce backend implements (MPI, SHM, RING, hierarchical, NCCL).

The `Communicator` front validates arguments, converts dtypes, handles MEAN (a SUM followed by a
division) and compression, then hands contiguous 1-D buffers to a backend. One conformance test
(``tests/mpi/test_backend_conformance.py``) runs the same cases against every backend.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from hpcdist.comm.checks import Deadline, Header
from hpcdist.comm.reduce_op import ReduceOp

__all__ = ["Backend"]


@runtime_checkable
class Backend(Protocol):
    """An implementation of the data-moving collectives.

    Buffers are contiguous 1-D arrays of equal dtype and size on every rank (the header check
    guarantees it before data moves). ``op`` is never MEAN. When ``header`` is not None the
    backend verifies it across ranks first and raises `CollectiveMismatchError` on every rank if
    they differ. Every wait goes through ``deadline``.
    """

    name: str

    def allreduce(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """Reduce ``src`` over all ranks into ``dst`` (``src is dst`` means in place)."""

    def broadcast(
        self, buf: np.ndarray, root: int, header: Header | None, deadline: Deadline
    ) -> None:
        """Copy ``buf`` of rank ``root`` into ``buf`` on every rank."""

    def close(self) -> None:
        """Release the backend's resources (collective)."""
