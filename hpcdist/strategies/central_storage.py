"""`CentralStorageStrategy`: one copy of each variable, compute on several replicas.

In one process (TF's strategy) the replicas are the local ``compute_devices`` and each variable
has a single copy on the parameter device. Beyond TF, under MPI on one node, every rank is a
replica and each ON_WRITE variable lives once in node shared memory
(`hpcdist.strategies.shared_storage.SharedStorage`): N ranks hold one copy instead of N. Updates in
replica context are aggregated across all replicas (SUM, MEAN or ONLY_FIRST_REPLICA, as for
mirrored variables) and applied once by the node leader. ON_READ variables keep a copy per
replica.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hpcdist.cluster.gpus import bind_gpu, visible_gpu_count
from hpcdist.comm import Communicator
from hpcdist.core.variables import LocalStorage, VariableSynchronization
from hpcdist.strategies.mirrored import check_device_exists, local_devices
from hpcdist.strategies.shared_storage import SharedStorage
from hpcdist.strategies.strategy import Strategy, StrategyExtended

__all__ = ["CentralStorageStrategy"]


class _CentralExtended(StrategyExtended):
    def __init__(
        self, strategy: Strategy, communicator: Communicator | None, devices, parameter_device
    ):
        super().__init__(
            strategy, communicator if communicator and communicator.size > 1 else None, devices
        )
        self.parameter_device = parameter_device
        # A private duplicate: the storage barriers never interleave with the collectives.
        self._node_comm = (
            communicator.mpi_comm.Dup() if communicator and communicator.size > 1 else None
        )

    def make_storage(self, value: np.ndarray, synchronization: Any) -> list:
        if synchronization is VariableSynchronization.ON_READ:
            return [LocalStorage(value) for _ in range(self.local_replicas)]
        if self._node_comm is not None:
            shared = SharedStorage(value, self._node_comm)
        else:
            shared = LocalStorage(value)
        return [shared] * self.local_replicas


class CentralStorageStrategy(Strategy):
    """Variables on one parameter device (or in node shared memory), compute replicated.

    Args:
        compute_devices: Local replicas' devices; default every visible GPU (one process) or
            this rank's GPU (several ranks), else ``cpu:0``.
        parameter_device: Where variables live in one process; default ``cpu:0``.

    A variable is one value here, as TF's central-storage variables are: its
    `experimental_local_results` is the variable itself, and `reduce` treats it as a
    non-distributed value.

    Raises:
        ValueError: The ranks span more than one node (use `MultiWorkerMirroredStrategy`), or a
            device name is malformed.
    """

    variables_per_replica = False

    def __init__(
        self, compute_devices: Sequence[str] | None = None, parameter_device: str | None = None
    ) -> None:
        parameter = check_device_exists(parameter_device or "cpu:0", "parameter_device")
        if compute_devices is not None:  # check before the collective construction
            local_devices(compute_devices, "compute_devices")
        comm = Communicator()
        if compute_devices is None and comm.size > 1:
            # Several ranks on the node: each computes on its own GPU (or the CPU).
            gpu = bind_gpu(comm.local_rank) if visible_gpu_count() else None
            compute_devices = [f"gpu:{gpu}" if gpu is not None else "cpu:0"]
        devices = local_devices(compute_devices, "compute_devices")
        if comm.num_nodes > 1:
            comm.close()
            raise ValueError(
                f"CentralStorageStrategy keeps one copy per node, but the {comm.size} ranks span "
                f"{comm.num_nodes} nodes: use MultiWorkerMirroredStrategy"
            )
        self.extended = _CentralExtended(self, comm, devices, parameter)
        self._communicator = comm
