"""Which backend carries a collective: the backends of one communicator and the rules to pick.

Host arrays (numpy) go to MPI, SHM, RING or the hierarchical backend as
`CommunicationImplementation` says (AUTO: shared memory from ``HPCDIST_SHM_MIN_BYTES``, MPI
below); a collective that the preferred backend does not carry (its ``collectives``) goes to the
MPI backend. Compressed all-reduces go to a backend that reduces the wire format (its
``compression``), wrapped in `CompressedBackend`. GPU arrays (CuPy) stay on the device with NCCL
(created on first use, collectively, on the array's GPU) or, opted in, CUDA-aware MPI; otherwise
they are staged through pinned host memory to the host backends.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from hpcdist.cluster.topology import NodeLayout
from hpcdist.comm.backend import Backend
from hpcdist.comm.compression import CompressedBackend, get_codec
from hpcdist.comm.cuda_mpi import CudaAwareMpiBackend
from hpcdist.comm.hierarchical import HierarchicalBackend
from hpcdist.comm.mpi_backend import MpiBackend
from hpcdist.comm.nccl_backend import HierarchicalNcclBackend, NcclBackend, nccl_available
from hpcdist.comm.options import CommunicationImplementation
from hpcdist.comm.ring import RingBackend
from hpcdist.comm.shm_backend import ShmBackend
from hpcdist.settings import Settings
from hpcdist.utils.xp import is_device_array

__all__ = ["Backends"]

_NCCL_IMPLS = (CommunicationImplementation.AUTO, CommunicationImplementation.NCCL)
_CUDA_MPI_IMPLS = (CommunicationImplementation.AUTO, CommunicationImplementation.MPI)
_NCCL_MISSING = (
    "implementation='nccl' needs CuPy with NCCL (pip install 'hpcdist[gpu]'); "
    "cupy.cuda.nccl cannot be loaded"
)


class Backends:
    """The backends of one communicator, and which one carries each collective.

    Construction is collective (the shared-memory segment is allocated).

    Args:
        comm: The library's communicator.
        node_comm: This node's ranks.
        leader_comm: The node leaders, or ``MPI.COMM_NULL`` on other ranks.
        layout: Where every rank runs.
        settings: Library settings.
    """

    def __init__(
        self,
        comm: MPI.Intracomm,
        node_comm: MPI.Intracomm,
        leader_comm: MPI.Intracomm,
        layout: NodeLayout,
        settings: Settings,
    ) -> None:
        self.comm, self.node_comm, self.leader_comm = comm, node_comm, leader_comm
        self.settings = settings
        self.num_nodes = layout.num_nodes
        node_ranks = [r for r in range(layout.size) if layout.node_of_rank[r] == layout.node_rank]
        self.shm = ShmBackend(node_comm, chunk_bytes=settings.shm_chunk_bytes, ranks=node_ranks)
        self.mpi = MpiBackend(comm)
        self.ring = RingBackend(comm)
        self.hier = HierarchicalBackend(comm, node_comm, leader_comm, self.shm)
        self.cuda_mpi = CudaAwareMpiBackend(comm)
        self.nccl: NcclBackend | None = None  # created by the first collective that needs it
        self.nccl_hier: HierarchicalNcclBackend | None = None
        #: The shared-memory implementation: plain on one node, hierarchical across nodes.
        self.local: Backend = self.shm if self.num_nodes == 1 else self.hier
        #: Compares headers across ranks (its ``barrier``).
        self.checker: Backend = self.shm if self.num_nodes == 1 else self.mpi
        self._compressed: dict[tuple[str, str], CompressedBackend] = {}

    # -- host arrays --------------------------------------------------------------------------

    def for_allreduce(self, nbytes: int, impl: CommunicationImplementation) -> Backend:
        """The host backend of an all-reduce of ``nbytes`` bytes."""
        if impl is CommunicationImplementation.MPI:
            return self.mpi
        if impl is CommunicationImplementation.RING:
            return self.ring
        if impl is CommunicationImplementation.SHM or nbytes >= self.settings.shm_min_bytes:
            return self.local
        return self.mpi

    def gathers(
        self,
        dtype: np.dtype,
        nbytes: int,
        impl: CommunicationImplementation,
        compression: str | None,
    ) -> bool:
        """Whether a pack of ``nbytes`` of ``dtype`` is gathered straight into the shared segment.

        True on one node of several ranks when the pack goes to the shared-memory backend
        uncompressed and that backend reduces ``dtype`` as it is: tensor fusion then skips the
        pack buffer (`ShmBackend.allreduce_gather`) and packs a dtype's tensors together.
        """
        return (
            self.num_nodes == 1
            and self.shm.n > 1
            and compression is None
            and dtype.isnative
            and dtype.char in self.shm.dtypes
            and self.for_allreduce(nbytes, impl) is self.shm
        )

    def for_host(self, collective: str) -> Backend:
        """The host backend of a collective other than all-reduce.

        Shared memory on one node when it carries ``collective``, else MPI.
        """
        preferred = self.shm if self.num_nodes == 1 else self.mpi
        return preferred if collective in preferred.collectives else self.mpi

    def compressed(self, backend: Backend, compression: str) -> Backend:
        """``backend``'s all-reduce in the 16-bit wire format ``compression``.

        The ring reduces the words instead when ``backend`` cannot (MPI, SHM).
        """
        if compression not in backend.compression:
            backend = self.ring
        key = (backend.name, compression)
        wrapped = self._compressed.get(key)
        if wrapped is None or wrapped.fallback is not backend:
            wrapped = self._compressed[key] = CompressedBackend(backend, get_codec(compression))
        return wrapped

    # -- GPU arrays ---------------------------------------------------------------------------

    def device_path(
        self, x: Any, impl: CommunicationImplementation, allreduce: bool = False
    ) -> tuple[str | None, str | None]:
        """Which backend keeps the CuPy array ``x`` on its GPU, and why it cannot.

        Returns:
            ``("nccl", None)`` under AUTO or NCCL when NCCL loads; ``("mpi", None)`` for an
            all-reduce with ``HPCDIST_CUDA_AWARE_MPI=1`` under AUTO or MPI otherwise;
            ``(None, None)`` to stage through pinned host memory; ``("nccl", why)`` when
            NCCL was asked for and cannot load (an error on every rank).

        Raises:
            ValueError: The NCCL backend exists, on another GPU than ``x``'s.
        """
        if not is_device_array(x):
            return None, None
        if impl in _NCCL_IMPLS and nccl_available():
            if self.nccl is not None:
                self.nccl.check_device(x)  # before the header check: agreed by every rank
            return "nccl", None
        if allreduce and self.settings.cuda_aware_mpi and impl in _CUDA_MPI_IMPLS:
            return "mpi", None
        if impl is CommunicationImplementation.NCCL:
            return "nccl", _NCCL_MISSING
        return None, None

    def for_device(self, path: str, x: Any, allreduce: bool = False) -> Backend:
        """The GPU backend of ``path`` for the CuPy array ``x``.

        NCCL is created on first use, collectively, on ``x``'s GPU; all-reduces across nodes
        use the hierarchical one when ``HPCDIST_NCCL_HIERARCHICAL``.
        """
        if path == "mpi":
            return self.cuda_mpi
        nccl = self.nccl_on(x.device.id)
        nccl.check_device(x)
        if not allreduce or not (self.settings.nccl_hierarchical and self.num_nodes > 1):
            return nccl
        return self.nccl_hierarchical_on(x.device.id)

    def nccl_on(self, device: int) -> NcclBackend:
        """The NCCL backend (created on first use, collectively, on GPU ``device``)."""
        if self.nccl is None:
            self.nccl = NcclBackend(self.comm, device)
        return self.nccl

    def nccl_hierarchical_on(self, device: int) -> HierarchicalNcclBackend:
        """The hierarchical NCCL backend (created on first use, collectively)."""
        if self.nccl_hier is None:
            self.nccl_hier = HierarchicalNcclBackend(
                self.comm,
                self.node_comm,
                self.leader_comm,
                device,
                self.settings.cuda_aware_mpi,
            )
        return self.nccl_hier

    # -- all of them --------------------------------------------------------------------------

    def available(self, device: int | None = None) -> dict[str, Backend]:
        """Every backend, by name: the host ones, and with ``device`` the GPU ones on it.

        Collective when ``device`` is given and the NCCL backends do not exist yet.
        """
        out: dict[str, Backend] = {"mpi": self.mpi, "ring": self.ring, "hierarchical": self.hier}
        if self.num_nodes == 1:
            out["shm"] = self.shm
        if device is not None:
            out["cuda-aware-mpi"] = self.cuda_mpi
            if nccl_available():
                out["nccl"] = self.nccl_on(device)
                out["nccl-hierarchical"] = self.nccl_hierarchical_on(device)
        return out

    def close(self) -> None:
        """Release the shared-memory segment and the NCCL communicators (collective)."""
        self.shm.close()
        for backend in (self.nccl_hier, self.nccl):
            if backend is not None:
                backend.close()
