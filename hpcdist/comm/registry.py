"""The public registry of backends: every backend object of a communicator, by name.

``available_backends(comm)`` returns the host backends (``"mpi"``, ``"ring"``,
``"hierarchical"``, and ``"shm"`` on a single node) and, where CuPy sees a GPU, the GPU ones
(``"cuda-aware-mpi"``, and ``"nccl"`` and ``"nccl-hierarchical"`` where NCCL loads), created
on the current GPU. Each implements the whole `Backend` contract; the conformance test runs it
against every one of them.
"""

from __future__ import annotations

from hpcdist.cluster.devices import visible_gpu_count
from hpcdist.comm.backend import Backend
from hpcdist.comm.communicator import Communicator
from hpcdist.utils.xp import current_gpu, parse_gpu

__all__ = ["available_backends"]


def available_backends(comm: Communicator, gpu: bool | None = None) -> dict[str, Backend]:
    """Every backend of ``comm``, by name.

    Collective when it creates the NCCL backends (the first time GPU backends are asked for).

    Args:
        comm: The communicator.
        gpu: Include the GPU backends, on CuPy's current GPU; by default when CuPy sees one.

    Returns:
        Name -> backend object (shared with ``comm``: its collectives use the same objects).

    Raises:
        ValueError: ``gpu=True`` and CuPy sees no GPU on this rank.
    """
    device = None
    if gpu is not False and visible_gpu_count() > 0:
        device = parse_gpu(current_gpu())
    if gpu and device is None:
        raise ValueError(f"rank {comm.rank}: gpu=True but CuPy sees no GPU on this rank")
    return comm.backends.available(device)
