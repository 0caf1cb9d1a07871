"""`SharedStorage`: one copy of a variable per node, in MPI shared memory."""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.comm.rma import Window
from hpcdist.core.variables import Storage
from hpcdist.utils.xp import to_numpy

__all__ = ["SharedStorage"]


class SharedStorage(Storage):
    """One copy per node, in a shared `hpcdist.comm.rma.Window` (`CentralStorageStrategy`).

    Every rank of the node reads the same memory. Updates are collective: a node barrier (every
    rank has finished reading the old value), the leader applies the update once, a second
    barrier (nobody reads a half-written value); so a delta applied by every rank counts once.

    Args:
        value: The initial value (only the leader's is used).
        node_comm: The ranks of this node (collective construction).
    """

    def __init__(self, value: np.ndarray, node_comm: Any) -> None:
        value = np.asarray(value)
        self.comm = node_comm
        self.leader = node_comm.Get_rank() == 0
        nbytes = max(value.nbytes, 1)
        self.win = Window.allocate_shared(node_comm, nbytes if self.leader else 0, 1)
        buf, _ = self.win.shared_memory(0)
        self.array = np.frombuffer(buf, dtype=value.dtype, count=value.size).reshape(value.shape)
        if self.leader:
            self.array[...] = value
        node_comm.Barrier()

    def read(self) -> np.ndarray:
        """The shared array (read-only by convention)."""
        return self.array

    def write(self, value: np.ndarray) -> None:
        """Collective: the leader writes between two node barriers."""
        self.comm.Barrier()
        if self.leader:
            self.array[...] = to_numpy(value)  # host memory: a GPU value is copied back
        self.comm.Barrier()

    def add(self, delta: np.ndarray) -> None:
        """Collective: the leader adds between two node barriers."""
        self.comm.Barrier()
        if self.leader:
            self.array += to_numpy(delta)
        self.comm.Barrier()
