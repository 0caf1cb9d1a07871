"""`MultiWorkerMirroredStrategy`: one replica per MPI rank, all-reduce across ranks."""

from __future__ import annotations

from hpcdist.cluster.base import ClusterResolver
from hpcdist.cluster.gpus import bind_gpu, visible_gpu_count
from hpcdist.cluster.resolve import resolve
from hpcdist.comm import Communicator
from hpcdist.comm.options import CommunicationImplementation, CommunicationOptions
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
            timeout, compression). A `CommunicationImplementation` or its name (``"nccl"``)
            is accepted too, as TF's older ``communication=`` argument, and means
            ``CommunicationOptions(implementation=...)``.

    Raises:
        TypeError: ``cluster_resolver`` is not a `ClusterResolver`, or
            ``communication_options`` is neither `CommunicationOptions`, a
            `CommunicationImplementation` nor a string (checked before any collective).
        ValueError: ``communication_options`` is a string that names no implementation.
    """

    def __init__(
        self,
        cluster_resolver: ClusterResolver | None = None,
        communication_options: CommunicationOptions
        | CommunicationImplementation
        | str
        | None = None,
    ) -> None:
        if cluster_resolver is not None and not isinstance(cluster_resolver, ClusterResolver):
            raise TypeError(
                "cluster_resolver must be a hpcdist.cluster.ClusterResolver (e.g. "
                "SlurmClusterResolver(), TFConfigClusterResolver()) or None, got "
                f"{cluster_resolver!r} ({type(cluster_resolver).__name__})"
            )
        options = _communication_options(communication_options)
        self._cluster_resolver = cluster_resolver if cluster_resolver is not None else resolve()
        self.communication_options = options
        comm = Communicator(options=self.communication_options)
        # One GPU per rank when the rank sees any (bound from its local rank); else the CPU.
        gpu = bind_gpu(self._cluster_resolver.local_rank) if visible_gpu_count() else None
        devices = (f"gpu:{gpu}",) if gpu is not None else ("cpu:0",)
        self.extended = StrategyExtended(self, comm if comm.size > 1 else None, devices=devices)
        self._communicator = comm


def _communication_options(
    value: CommunicationOptions | CommunicationImplementation | str | None,
) -> CommunicationOptions:
    """``communication_options`` as `CommunicationOptions` (see the strategy's Args)."""
    if value is None:
        return CommunicationOptions()
    if isinstance(value, CommunicationOptions):
        return value
    if isinstance(value, (CommunicationImplementation, str)):
        return CommunicationOptions(implementation=CommunicationImplementation.parse(value))
    raise TypeError(
        "communication_options must be a hd.CommunicationOptions, a "
        "hd.CommunicationImplementation or its name (one of "
        f"{[m.value for m in CommunicationImplementation]}), or None; got {value!r} "
        f"({type(value).__name__})"
    )
