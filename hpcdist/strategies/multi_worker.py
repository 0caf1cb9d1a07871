"""`MultiWorkerMirroredStrategy`: one replica per MPI rank, all-reduce across ranks."""

from __future__ import annotations

from hpcdist.cluster.base import ClusterResolver
from hpcdist.cluster.gpus import bind_gpu, visible_gpu_count
from hpcdist.cluster.resolve import resolve
from hpcdist.comm import Communicator
from hpcdist.comm.options import CommunicationOptions
from hpcdist.strategies.strategy import Strategy, StrategyExtended

__all__ = ["MultiWorkerMirroredStrategy"]


class MultiWorkerMirroredStrategy(Strategy):
    """Synchronous data parallelism over all ranks (collective at construction).

    Each rank is a worker with one replica; ``replica_id_in_sync_group`` is the rank. A rank
    that sees GPUs binds to one (`hpcdist.cluster.gpus.bind_gpu`) and keeps its variables and
    computation there; gradients are then all-reduced by NCCL (``implementation="auto"`` or
    ``"nccl"``).

    Args:
        cluster_resolver: Where this process sits; `hpcdist.cluster.resolve()` by default.
        communication_options: Options of the strategy's collectives (backend, fusion,
            timeout, compression).
    """

    def __init__(
        self,
        cluster_resolver: ClusterResolver | None = None,
        communication_options: CommunicationOptions | None = None,
    ) -> None:
        self._cluster_resolver = cluster_resolver or resolve()
        self.communication_options = communication_options or CommunicationOptions()
        comm = Communicator(options=self.communication_options)
        # One GPU per rank when the rank sees any (bound from its local rank); else the CPU.
        gpu = bind_gpu(self._cluster_resolver.local_rank) if visible_gpu_count() else None
        devices = (f"gpu:{gpu}",) if gpu is not None else ("cpu:0",)
        self.extended = StrategyExtended(self, comm if comm.size > 1 else None, devices=devices)
        self._communicator = comm
