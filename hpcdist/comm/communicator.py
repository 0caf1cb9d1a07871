"""`Communicator`: hpcdist's collectives on numpy and CuPy arrays (GPU paths: docs/gpus.md).

One `Communicator` per process group, on its own ``Dup()`` of the communicator it is given, so
hpcdist's traffic never mixes with the user's. Every collective:

1. converts its input to a contiguous host buffer and validates the arguments locally;
2. checks, across ranks, that everybody called the same collective with the same op, dtype and
   shape (on a single node this rides on the shared-memory barrier; across nodes it is one
   16-byte all-reduce). Invalid local arguments poison the check, so *every* rank raises
   instead of some ranks waiting forever;
3. moves data with the backend chosen for the message (see `CommunicationImplementation`);
4. waits under a `Deadline`: past ``timeout_seconds`` the waiting ranks raise
   `DeadlineExceededError` naming the ranks that never joined, and the communicator refuses
   further work (`UnavailableError`), because the abandoned operation may still complete.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from mpi4py import MPI
from mpi4py.util import pkl5

from hpcdist import abort
from hpcdist.cluster.topology import NodeLayout, node_layout, split_node
from hpcdist.comm import fusion
from hpcdist.comm.arrays import check_reducible, to_host, wire_dtype
from hpcdist.comm.backend import Backend
from hpcdist.comm.checks import (
    _MASK,
    KINDS,
    ArrivalBoard,
    Deadline,
    Header,
    verify_headers,
)
from hpcdist.comm.compression import get_codec
from hpcdist.comm.cuda_mpi import CudaAwareMpiBackend
from hpcdist.comm.hierarchical import HierarchicalBackend
from hpcdist.comm.mpi_backend import MpiBackend, wait_request
from hpcdist.comm.nccl_ops import (
    allgather_on_device,
    broadcast_on_device,
    device_reduce_error,
    nccl_available,
    reduce_on_device,
    reduce_scatter_on_device,
)
from hpcdist.comm.options import CommunicationImplementation, CommunicationOptions
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.comm.ring import RingBackend, ring_allreduce
from hpcdist.comm.shm_backend import ShmBackend
from hpcdist.errors import CollectiveMismatchError, DeadlineExceededError, UnavailableError
from hpcdist.settings import Settings, get_settings
from hpcdist.utils.split import balanced_sizes
from hpcdist.utils.xp import current_gpu, device_scope, is_device_array

__all__ = ["Communicator", "Handle", "world"]

_POISON = -0x5BAD
_ALLREDUCE = KINDS["allreduce"]
_MEAN = ReduceOp.MEAN
_OPS: dict[Any, ReduceOp] = {op: op for op in ReduceOp}
_OPS.update({op.name: op for op in ReduceOp})
_OPS.update({op.name.lower(): op for op in ReduceOp})
# dtype characters the one-barrier hot path reduces directly (numeric, not bool or complex)
_FAST_CHARS = frozenset("efdbBhHiIlLqQ")
# op or name -> (op, code, ufunc) for the hot path (enum properties cost a lookup each)
_SMALL_OPS = {key: (op, op.code, op.ufunc) for key, op in _OPS.items()}
_SHM_IMPLS = (CommunicationImplementation.AUTO, CommunicationImplementation.SHM)
_NCCL_IMPLS = (CommunicationImplementation.AUTO, CommunicationImplementation.NCCL)
_CUDA_MPI_IMPLS = (CommunicationImplementation.AUTO, CommunicationImplementation.MPI)


class _Resolved(NamedTuple):
    """Options with every default filled in (cached per options object)."""

    implementation: CommunicationImplementation
    timeout: float | None
    compression: str | None
    bytes_per_pack: int


class Handle:
    """The pending result of an ``*_async`` collective.

    Args:
        future: The future running the collective, or None when it already ran.
        result: The result when it already ran.
    """

    def __init__(self, future: concurrent.futures.Future | None, result: Any = None) -> None:
        self._future = future
        self._result = result

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the collective completes and return its result (or raise its error)."""
        if self._future is None:
            return self._result
        return self._future.result(timeout)

    def test(self) -> bool:
        """Return whether the collective has completed."""
        return self._future is None or self._future.done()


class Communicator:
    """Collectives over a group of ranks.

    Construction is collective over ``comm``. On more than one rank it installs the
    abort-on-exception hook (`hpcdist.abort`) unless ``HPCDIST_ABORT_ON_EXCEPTION=0``.

    Args:
        comm: The process group; ``MPI.COMM_WORLD`` by default. hpcdist works on a ``Dup()``.
        options: Default options of this communicator's collectives.
        settings: Library settings; read from the environment by default.
    """

    def __init__(
        self,
        comm: MPI.Intracomm | None = None,
        options: CommunicationOptions | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        self.options = options or CommunicationOptions()
        self._comm: MPI.Intracomm = (MPI.COMM_WORLD if comm is None else comm).Dup()
        self.layout: NodeLayout = node_layout(self._comm, self.settings.ranks_per_node)
        self._seq = 0
        self._broken: str | None = None
        self._resolved: dict[CommunicationOptions | None, _Resolved] = {}
        self._stall = self.settings.stall_warning_seconds
        self._pkl = pkl5.Intracomm(self._comm)
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: list[concurrent.futures.Future] = []
        self._node_comm = split_node(self._comm, self.settings.ranks_per_node)
        color = 0 if self._node_comm.Get_rank() == 0 else MPI.UNDEFINED
        self._leader_comm = self._comm.Split(color, self._comm.Get_rank())
        node_ranks = [r for r in range(self.size) if self.layout.node_of_rank[r] == self.node_rank]
        self._board = ArrivalBoard(self._comm) if self.size > 1 else None
        self._shm = ShmBackend(
            self._node_comm, chunk_bytes=self.settings.shm_chunk_bytes, ranks=node_ranks
        )
        self._mpi = MpiBackend(self._comm)
        default = self._opts(None)
        self._small_deadline = Deadline(default.timeout, self._stall, None, self._board, 0)
        self._fast = self.size > 1 and self.num_nodes == 1 and self.settings.shm_min_bytes == 0
        self._checks = self.settings.check_collectives
        self._ring = RingBackend(self._comm)
        self._hier = HierarchicalBackend(self._comm, self._node_comm, self._leader_comm, self._shm)
        self._nccl: Any = None  # NcclBackend, created by the first collective that needs it
        self._nccl_hier: Any = None
        self._cuda_mpi = CudaAwareMpiBackend(self._comm)
        _register(self)
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
    def mpi_comm(self) -> MPI.Intracomm:
        """Hpcdist's private duplicate of the communicator (do not use it for your traffic)."""
        return self._comm

    def __repr__(self) -> str:
        return (
            f"Communicator(rank={self.rank}, size={self.size}, local_rank={self.local_rank}, "
            f"local_size={self.local_size}, nodes={self.num_nodes})"
        )

    # -- machinery ----------------------------------------------------------------------------

    def _opts(self, options: CommunicationOptions | None) -> _Resolved:
        resolved = self._resolved.get(options)
        if resolved is None:
            merged = self.options.merge(options)
            impl = merged.implementation
            if impl is CommunicationImplementation.AUTO:
                impl = CommunicationImplementation.parse(self.settings.implementation)
            resolved = _Resolved(
                impl,
                merged.timeout_seconds
                if merged.timeout_seconds is not None
                else self.settings.timeout_seconds,
                merged.compression,
                merged.bytes_per_pack
                if merged.bytes_per_pack is not None
                else self.settings.bytes_per_pack,
            )
            self._resolved[options] = resolved
        return resolved

    def _begin(
        self, header_fn: Callable[[int], Header], opts: _Resolved
    ) -> tuple[Header, Deadline]:
        if self._broken is not None:
            raise UnavailableError(
                f"rank {self.rank}: this communicator is unusable after an earlier failure "
                f"({self._broken}); restart the job (restore from the latest checkpoint)"
            )
        self._seq += 1
        header = header_fn(self._seq)
        board = self._board
        if board is not None:
            board.mine[0] = self._seq
        return header, Deadline(opts.timeout, self._stall, header, board)

    def _guard(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except DeadlineExceededError as exc:
            self._broken = f"{type(exc).__name__}: {exc}"
            raise

    def _check(
        self, header: Header, deadline: Deadline, local_error: Exception | None = None
    ) -> None:
        """Verify the header across ranks; a local error poisons it so every rank raises."""
        if local_error is not None:
            header = header.replace_extra(_POISON)
        elif not self.settings.check_collectives or self.size == 1:
            return
        try:
            if self.size == 1:
                pass
            elif self.num_nodes == 1:
                self._shm.barrier(header, deadline)
            else:
                verify_headers(self._comm, header, deadline)
        except CollectiveMismatchError as exc:
            if local_error is not None:
                raise local_error from None
            bad = [r for r, d in enumerate(exc.descriptions) if f"({_POISON})" in d]
            if bad:
                raise CollectiveMismatchError(
                    f"collective {header.describe()} failed: invalid arguments on rank(s) "
                    f"{','.join(map(str, bad))} (see the error on those ranks)",
                    exc.descriptions,
                ) from None
            raise
        if local_error is not None:
            raise local_error

    def _choose(self, nbytes: int, opts: _Resolved) -> Backend:
        impl = opts.implementation
        if impl is CommunicationImplementation.MPI:
            return self._mpi
        if impl is CommunicationImplementation.RING:
            return self._ring
        shm = self._shm if self.num_nodes == 1 else self._hier
        if impl is CommunicationImplementation.SHM or nbytes >= self.settings.shm_min_bytes:
            return shm
        return self._mpi

    def _drain(self) -> None:
        pending, self._pending = self._pending, []
        for future in pending:
            future.exception()

    def _async(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Handle:
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            return Handle(None, fn(*args, **kwargs))
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, "hpcdist-comm")
        # CUDA's current device is per thread: the collective runs on the caller's.
        future = self._executor.submit(self._run, current_gpu(), fn, *args, **kwargs)
        self._pending.append(future)
        return Handle(future)

    def _run(self, device: str | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._lock, device_scope(device):
            return fn(*args, **kwargs)

    def _sync(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._pending:
            self._drain()
        with self._lock:
            return fn(*args, **kwargs)

    # -- all-reduce ---------------------------------------------------------------------------

    def _allreduce(
        self, x: Any, op: ReduceOp | str, options: CommunicationOptions | None, in_place: bool
    ) -> Any:
        op = _OPS.get(op) or ReduceOp.parse(op)
        opts = self._opts(options)
        path, why = None, None
        if type(x) is np.ndarray:
            arr, back = x, None
        else:
            path, why = self._device_path(x, opts, allreduce=True)
            arr, back = (x, None) if path else to_host(x)
        on_device = path is not None
        kind = KINDS["nccl_allreduce"] if path == "nccl" else _ALLREDUCE
        header, deadline = self._begin(
            lambda seq: Header(seq, kind, op.code, ord(arr.dtype.char), arr.shape), opts
        )
        error = why
        if error is None and arr.dtype.kind in "bc":
            error = check_reducible(arr.dtype, op)
        if on_device and error is None:
            error = device_reduce_error(arr.dtype, op)
        writeable = (type(x) is np.ndarray and x.flags.writeable) or on_device
        if in_place and error is None and not writeable:
            error = (
                f"allreduce_ works in place on writeable numpy (or device-carried CuPy) arrays "
                f"only, got {type(x).__name__}"
            )
        local_error = self._rank_error(error, why)
        reduce = self._reduce_device(path) if on_device else self._reduce
        return self._guard(
            lambda: reduce(x, arr, back, op, opts, header, deadline, local_error, in_place)
        )

    def _device_path(
        self, x: Any, opts: _Resolved, allreduce: bool = False
    ) -> tuple[str | None, str | None]:
        """Which backend keeps the CuPy array ``x`` on its GPU, and why it cannot.

        Returns:
            ``("nccl", None)`` under AUTO or NCCL when NCCL loads; ``("mpi", None)`` for an
            all-reduce with ``HPCDIST_CUDA_AWARE_MPI=1`` under AUTO or MPI otherwise;
            ``(None, None)`` to stage through pinned host memory; ``("nccl", why)`` when
            NCCL was asked for and cannot load (an error on every rank).
        """
        if not is_device_array(x):
            return None, None
        impl = opts.implementation
        if impl in _NCCL_IMPLS and nccl_available():
            return "nccl", None
        if allreduce and self.settings.cuda_aware_mpi and impl in _CUDA_MPI_IMPLS:
            return "mpi", None
        if impl is CommunicationImplementation.NCCL:
            return "nccl", (
                "implementation='nccl' needs CuPy with NCCL (pip install 'hpcdist[gpu]'); "
                "cupy.cuda.nccl cannot be loaded"
            )
        return None, None

    def _rank_error(self, error: str | None, why: str | None) -> Exception | None:
        """This rank's argument error, if any (it poisons the header check).

        `UnavailableError` when the error is ``why`` (NCCL was asked for and cannot load), else
        `TypeError`.
        """
        if not error:
            return None
        kind = UnavailableError if error == why else TypeError
        return kind(f"rank {self.rank}: {error}")

    def _nccl_for(self, x: Any, allreduce: bool = False) -> Any:
        """The NCCL backend (created on first use, collectively, on ``x``'s GPU).

        All-reduces across nodes use the hierarchical one when ``HPCDIST_NCCL_HIERARCHICAL``.
        """
        from hpcdist.comm.nccl_backend import HierarchicalNcclBackend, NcclBackend

        if self._nccl is None:
            self._nccl = NcclBackend(self._comm, x.device.id)
        self._nccl.check_device(x)
        if not allreduce or not (self.settings.nccl_hierarchical and self.num_nodes > 1):
            return self._nccl
        if self._nccl_hier is None:
            self._nccl_hier = HierarchicalNcclBackend(
                self._comm,
                self._node_comm,
                self._leader_comm,
                x.device.id,
                self.settings.cuda_aware_mpi,
            )
        return self._nccl_hier

    def _reduce_device(self, path: str) -> Callable[..., Any]:
        """The reduce step for GPU arrays carried by ``path`` (``"nccl"`` or ``"mpi"``)."""
        if path == "nccl":
            return self._reduce_on_gpu
        return lambda *args: self._reduce_on_gpu(*args, backend=self._cuda_mpi)

    def _reduce_on_gpu(
        self,
        x: Any,
        arr: Any,
        back: Any,
        op: ReduceOp,
        opts: _Resolved,
        header: Header,
        deadline: Deadline,
        local_error: Exception | None,
        in_place: bool,
        backend: Any = None,
    ) -> Any:
        """Check, then reduce the CuPy array ``arr`` on its GPU (NCCL unless ``backend``)."""
        del back
        self._check(header, deadline, local_error)
        compress = opts.compression if arr.dtype.kind == "f" and op.code <= 2 else None
        backend = backend or self._nccl_for(arr, allreduce=True)
        result = reduce_on_device(backend, arr, op, self.size, compress, deadline, in_place)
        if in_place:
            if result.data.ptr != arr.data.ptr or not arr.flags.c_contiguous:
                arr[...] = result
            return x
        return result

    def _reduce(
        self,
        x: Any,
        arr: np.ndarray,
        back: Callable[[np.ndarray], Any] | None,
        op: ReduceOp,
        opts: _Resolved,
        header: Header,
        deadline: Deadline,
        local_error: Exception | None,
        in_place: bool,
    ) -> Any:
        """Check, then reduce ``arr``; the shared body of every all-reduce."""
        kind = arr.dtype.kind
        compress = opts.compression if kind == "f" and op.code <= 2 else None
        backend = self._ring if compress else self._choose(arr.nbytes, opts)
        fused = (
            backend is self._shm
            and local_error is None
            and self.num_nodes == 1
            and self.size > 1
            and self.settings.check_collectives
        )
        if not fused:
            self._check(header, deadline, local_error)
        contiguous = arr.flags.c_contiguous
        flat = arr.reshape(-1) if contiguous else np.ascontiguousarray(arr).reshape(-1)
        converted = kind == "b" or (arr.dtype.char == "e" and backend is not self._shm)
        if converted:
            src = dst = flat.view(np.uint8).copy() if kind == "b" else flat.astype(np.float32)
        elif in_place and contiguous:
            src = dst = flat
        else:
            src, dst = flat, np.empty_like(flat)
        if self.size == 1 and not compress:
            if src is not dst:
                dst[:] = src
        elif compress:
            if src is not dst:
                dst[:] = src
            ring_allreduce(self._comm, dst, op, deadline, get_codec(compress))
        else:
            backend.allreduce(src, dst, op, header if fused else None, deadline)
        if op is _MEAN:
            if dst.dtype.kind in "fc":
                dst /= self.size
            else:
                dst //= self.size
        result = dst if arr.ndim == 1 else dst.reshape(arr.shape)
        if converted:
            result = result.view(np.bool_) if kind == "b" else result.astype(arr.dtype)
        if in_place:
            if dst is not flat or not contiguous:
                arr[...] = result
            return x
        return result if back is None else back(result)

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
        if self._fast and type(x) is np.ndarray and not self._pending:
            opts = self._opts(options)
            if opts.compression is None and opts.implementation in _SHM_IMPLS:
                result = self._allreduce_small(x, op, opts.timeout)
                if result is not None:
                    return result
        return self._sync(self._allreduce, x, op, options, False)

    def _allreduce_small(
        self,
        x: np.ndarray,
        op: ReduceOp | str,
        timeout: float | None,
        out: np.ndarray | None = None,
    ) -> np.ndarray | None:
        """One-barrier shared-memory all-reduce of a small contiguous array, or None if not one.

        The same protocol as the general path (fingerprint in the shared-memory barrier), with
        the Python work per call cut to the minimum: small messages are latency-bound. With
        ``out`` (``x`` itself for ``allreduce_``) the result is written there.
        """
        spec = _SMALL_OPS.get(op)
        dtype = x.dtype
        shm = self._shm
        if (
            spec is None
            or dtype.char not in _FAST_CHARS
            or x.nbytes > shm.direct_bytes
            or self._broken is not None
            or not x.flags.c_contiguous
        ):
            return None
        op, code, ufunc = spec
        seq = self._seq = self._seq + 1
        self._board.mine[0] = seq
        shape = x.shape
        # With checks off every rank posts 0, so the comparison always passes.
        print_ = (
            hash((seq, _ALLREDUCE, code, ord(dtype.char), 0, shape)) & _MASK if self._checks else 0
        )
        deadline = self._small_deadline
        deadline.start, deadline.seq, deadline._warned = None, seq, False
        deadline.timeout, deadline.header = timeout, None
        deadline.header_fn = header = lambda: Header(seq, _ALLREDUCE, code, ord(dtype.char), shape)
        try:
            out = shm.allreduce_small(x, ufunc, print_, header, deadline, out)
        except DeadlineExceededError as exc:
            self._broken = f"{type(exc).__name__}: {exc}"
            raise
        if op is _MEAN:
            if dtype.kind == "f":
                out /= self.size
            else:
                out //= self.size
        return out

    def allreduce_(
        self,
        x: np.ndarray,
        op: ReduceOp | str = ReduceOp.SUM,
        options: CommunicationOptions | None = None,
    ) -> np.ndarray:
        """Reduce ``x`` in place over all ranks and return it."""
        if self._fast and type(x) is np.ndarray and not self._pending and x.flags.writeable:
            opts = self._opts(options)
            if opts.compression is None and opts.implementation in _SHM_IMPLS:
                result = self._allreduce_small(x, op, opts.timeout, out=x)
                if result is not None:
                    return result
        return self._sync(self._allreduce, x, op, options, True)

    def allreduce_async(
        self, x: Any, op: ReduceOp | str = ReduceOp.SUM, options: CommunicationOptions | None = None
    ) -> Handle:
        """Start `allreduce`; the handle's ``wait()`` returns the result."""
        return self._async(self._allreduce, x, op, options, False)

    def allreduce_async_(
        self,
        x: np.ndarray,
        op: ReduceOp | str = ReduceOp.SUM,
        options: CommunicationOptions | None = None,
    ) -> Handle:
        """Start `allreduce_`; ``x`` holds the result once the handle's ``wait()`` returns."""
        return self._async(self._allreduce, x, op, options, True)

    # -- fused all-reduce ---------------------------------------------------------------------

    def _grouped(
        self, xs: Sequence[Any], op: ReduceOp | str, options: CommunicationOptions | None
    ) -> list[Any]:
        op = _OPS.get(op) or ReduceOp.parse(op)
        opts = self._opts(options)
        # GPU arrays stay on the GPU (packed there, carried by NCCL) when all of them can.
        paths = [self._device_path(x, opts, allreduce=True) for x in xs]
        path = paths[0][0] if xs and all(p == paths[0][0] for p, _ in paths) else None
        on_device = path is not None
        nccl_error = next((e for _, e in paths if e), None)
        if on_device:
            hosts = [(x, _same) for x in xs]
        else:
            hosts = [to_host(x) for x in xs]
            nccl_error = None
        arrays = [a for a, _ in hosts]
        plan = fusion.plan_packs(arrays, opts.bytes_per_pack)
        results: list[Any] = [None] * len(arrays)
        layout = hash(tuple((ord(a.dtype.char), a.shape) for a in arrays)) & 0x3FFFFFFF
        kind = KINDS["nccl_grouped_allreduce" if path == "nccl" else "grouped_allreduce"]
        reduce = self._reduce_device(path) if on_device else self._reduce
        for indices in plan:
            members = [arrays[i] for i in indices]
            packed = fusion.pack(members)
            header, deadline = self._begin(
                lambda seq, p=packed: Header(
                    seq, kind, op.code, ord(p.dtype.char), p.shape, layout
                ),
                opts,
            )
            error = nccl_error or check_reducible(packed.dtype, op)
            if on_device and error is None:
                error = device_reduce_error(packed.dtype, op)
            local_error = self._rank_error(error, nccl_error)
            reduced = self._guard(
                lambda p=packed, h=header, d=deadline, e=local_error: reduce(
                    p, p, None, op, opts, h, d, e, True
                )
            )
            for i, part in zip(indices, fusion.unpack(reduced, members), strict=True):
                results[i] = hosts[i][1](part)
        if not plan:
            header, deadline = self._begin(
                lambda seq: Header(seq, KINDS["grouped_allreduce"]), opts
            )
            self._guard(lambda: self._check(header, deadline))
        return results

    def grouped_allreduce(
        self,
        xs: Sequence[Any],
        op: ReduceOp | str = ReduceOp.SUM,
        options: CommunicationOptions | None = None,
    ) -> list[Any]:
        """All-reduce a list of arrays in few fused operations (tensor fusion).

        Arrays are packed by dtype into buckets of about ``bytes_per_pack`` bytes (TF's rule),
        one all-reduce per bucket.

        Returns:
            The reduced arrays, in order.
        """
        return self._sync(self._grouped, xs, op, options)

    def grouped_allreduce_async(
        self,
        xs: Sequence[Any],
        op: ReduceOp | str = ReduceOp.SUM,
        options: CommunicationOptions | None = None,
    ) -> Handle:
        """Start `grouped_allreduce`."""
        return self._async(self._grouped, xs, op, options)

    # -- broadcast ----------------------------------------------------------------------------

    def _broadcast(
        self, x: Any, root: int, options: CommunicationOptions | None, in_place: bool
    ) -> Any:
        opts = self._opts(options)
        on_device, why = self._device_path(x, opts)
        arr, back = (x, _same) if on_device else to_host(x)
        kind = KINDS["nccl_broadcast" if on_device else "broadcast"]
        header, deadline = self._begin(
            lambda seq: Header(seq, kind, 0, ord(arr.dtype.char), arr.shape, root + 1),
            opts,
        )
        error = self._rank_error(why, why)
        if not isinstance(root, (int, np.integer)) or not 0 <= root < self.size:
            error = ValueError(
                f"rank {self.rank}: broadcast root must be in [0, {self.size}), got {root!r}"
            )
        elif in_place and not ((isinstance(x, np.ndarray) and x.flags.writeable) or on_device):
            error = TypeError(f"rank {self.rank}: broadcast_ needs a writeable numpy array")

        def run_device() -> Any:
            self._check(header, deadline, error)
            buf = arr.reshape(-1) if in_place and arr.flags.c_contiguous else arr.copy().ravel()
            broadcast_on_device(self._nccl_for(arr), buf, root, deadline)
            if in_place:
                if buf.data.ptr != arr.data.ptr:
                    arr[...] = buf.reshape(arr.shape)
                return x
            return buf.reshape(arr.shape)

        if on_device:
            return self._guard(run_device)

        def run() -> Any:
            fused = self.num_nodes == 1 and error is None and self.settings.check_collectives
            if not fused:
                self._check(header, deadline, error)
            buf = np.ascontiguousarray(arr).reshape(-1)
            buf = buf if (in_place and np.shares_memory(buf, arr)) else buf.copy()
            if self.size > 1:
                backend = self._shm if self.num_nodes == 1 else self._mpi
                backend.broadcast(buf, root, header if fused else None, deadline)
            result = buf.reshape(arr.shape)
            if in_place:
                if not np.shares_memory(result, arr):
                    arr[...] = result
                return x
            return back(result)

        return self._guard(run)

    def broadcast(self, x: Any, root: int = 0, options: CommunicationOptions | None = None) -> Any:
        """Return rank ``root``'s ``x`` on every rank (``x`` has the same shape everywhere)."""
        return self._sync(self._broadcast, x, root, options, False)

    def broadcast_(
        self, x: np.ndarray, root: int = 0, options: CommunicationOptions | None = None
    ) -> np.ndarray:
        """Overwrite ``x`` with rank ``root``'s ``x`` and return it."""
        return self._sync(self._broadcast, x, root, options, True)

    def broadcast_async(
        self, x: Any, root: int = 0, options: CommunicationOptions | None = None
    ) -> Handle:
        """Start `broadcast`."""
        return self._async(self._broadcast, x, root, options, False)

    # -- all-gather, reduce-scatter, all-to-all ------------------------------------------------

    def _allgather(self, x: Any, options: CommunicationOptions | None) -> Any:
        opts = self._opts(options)
        on_device, why = self._device_path(x, opts)
        arr, back = (x, _same) if on_device else to_host(x)
        if arr.ndim == 0:
            arr = arr.reshape(1)
        kind = KINDS["nccl_allgather" if on_device else "allgather"]
        header, deadline = self._begin(
            lambda seq: Header(seq, kind, 0, ord(arr.dtype.char), arr.shape[1:]),
            opts,
        )
        error = self._rank_error(why, why)

        def run() -> Any:
            self._check(header, deadline, error)
            rows = np.empty(self.size, dtype=np.int64)
            request = self._comm.Iallgather(np.array([arr.shape[0]], dtype=np.int64), rows)
            wait_request(request, deadline, False)
            if on_device:
                nccl = self._nccl_for(arr)
                return allgather_on_device(nccl, arr, [int(r) for r in rows], deadline)
            row = int(np.prod(arr.shape[1:], dtype=np.int64))
            out = np.empty((int(rows.sum()), *arr.shape[1:]), dtype=arr.dtype)
            counts = rows * row
            displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
            send = np.ascontiguousarray(arr)
            if arr.dtype.kind == "b":
                send, recv = send.view(np.uint8), out.view(np.uint8)
            else:
                recv = out
            request = self._comm.Iallgatherv(send, [recv, (counts, displs)])
            wait_request(request, deadline, deadline.timeout is None)
            return back(out)

        return self._guard(run)

    def allgather(self, x: Any, options: CommunicationOptions | None = None) -> Any:
        """Concatenate every rank's ``x`` along the first axis (first dims may differ)."""
        return self._sync(self._allgather, x, options)

    def allgather_async(self, x: Any, options: CommunicationOptions | None = None) -> Handle:
        """Start `allgather`."""
        return self._async(self._allgather, x, options)

    def _reduce_scatter(
        self, x: Any, op: ReduceOp | str, options: CommunicationOptions | None
    ) -> Any:
        op = ReduceOp.parse(op)
        opts = self._opts(options)
        on_device, why = self._device_path(x, opts)
        arr, back = (x, _same) if on_device else to_host(x)
        kind = KINDS["nccl_reduce_scatter" if on_device else "reduce_scatter"]
        header, deadline = self._begin(
            lambda seq: Header(seq, kind, op.code, ord(arr.dtype.char), arr.shape),
            opts,
        )
        error = why or check_reducible(arr.dtype, op)
        if error is None and arr.ndim == 0:
            error = "reduce_scatter needs an array with at least one axis"
        if error is None and on_device and arr.dtype.kind == "c":
            error = "reduce_scatter of complex GPU arrays is not supported by NCCL"
        local_error = self._rank_error(error, why)

        def run() -> Any:
            self._check(header, deadline, local_error)
            if on_device:
                rows = balanced_sizes(arr.shape[0], self.size)
                nccl = self._nccl_for(arr)
                return reduce_scatter_on_device(nccl, arr, op, rows, self.rank, deadline)
            wdtype = wire_dtype(arr.dtype, "mpi")
            src = (
                np.ascontiguousarray(arr, dtype=wdtype)
                if arr.dtype.kind != "b"
                else np.ascontiguousarray(arr).view(np.uint8)
            )
            rows = balanced_sizes(arr.shape[0], self.size)
            row = int(np.prod(arr.shape[1:], dtype=np.int64))
            out = np.empty((rows[self.rank], *arr.shape[1:]), dtype=src.dtype)
            counts = [r * row for r in rows]
            request = self._comm.Ireduce_scatter(src, out, counts, op=op.mpi)
            wait_request(request, deadline, deadline.timeout is None)
            if op is ReduceOp.MEAN:
                if out.dtype.kind in "fc":
                    out /= self.size
                else:
                    out //= self.size
            result = (
                out.view(np.bool_) if arr.dtype.kind == "b" else out.astype(arr.dtype, copy=False)
            )
            return back(result)

        return self._guard(run)

    def reduce_scatter(
        self, x: Any, op: ReduceOp | str = ReduceOp.SUM, options: CommunicationOptions | None = None
    ) -> Any:
        """Reduce ``x`` over ranks and return this rank's block of rows.

        Rows are split as evenly as possible: the first ``dim0 % size`` ranks get one extra row.
        """
        return self._sync(self._reduce_scatter, x, op, options)

    def reduce_scatter_async(
        self, x: Any, op: ReduceOp | str = ReduceOp.SUM, options: CommunicationOptions | None = None
    ) -> Handle:
        """Start `reduce_scatter`."""
        return self._async(self._reduce_scatter, x, op, options)

    def _alltoall(
        self, x: Any, splits: Sequence[int] | None, options: CommunicationOptions | None
    ) -> Any:
        opts = self._opts(options)
        arr, back = to_host(x)
        header, deadline = self._begin(
            lambda seq: Header(seq, KINDS["alltoall"], 0, ord(arr.dtype.char), arr.shape[1:]),
            opts,
        )
        error = None
        if arr.ndim == 0:
            error = ValueError(f"rank {self.rank}: alltoall needs an array with at least one axis")
        elif splits is None:
            if arr.shape[0] % self.size:
                error = ValueError(
                    f"rank {self.rank}: alltoall without splits needs dim 0 ({arr.shape[0]}) "
                    f"divisible by the number of ranks ({self.size})"
                )
            else:
                splits = [arr.shape[0] // self.size] * self.size
        else:
            splits = [int(s) for s in splits]
            if (
                len(splits) != self.size
                or any(s < 0 for s in splits)
                or sum(splits) != arr.shape[0]
            ):
                error = ValueError(
                    f"rank {self.rank}: alltoall splits {splits} must be {self.size} non-negative "
                    f"counts adding up to dim 0 ({arr.shape[0]})"
                )

        def run() -> Any:
            self._check(header, deadline, error)
            row = int(np.prod(arr.shape[1:], dtype=np.int64))
            send_rows = np.asarray(splits, dtype=np.int64)
            recv_rows = np.empty(self.size, dtype=np.int64)
            wait_request(self._comm.Ialltoall(send_rows, recv_rows), deadline, False)
            src = np.ascontiguousarray(arr)
            out = np.empty((int(recv_rows.sum()), *arr.shape[1:]), dtype=arr.dtype)
            s_counts, r_counts = send_rows * row, recv_rows * row
            s_displs = np.concatenate([[0], np.cumsum(s_counts)[:-1]])
            r_displs = np.concatenate([[0], np.cumsum(r_counts)[:-1]])
            send, recv = (
                (src.view(np.uint8), out.view(np.uint8)) if arr.dtype.kind == "b" else (src, out)
            )
            request = self._comm.Ialltoallv(
                [send, (s_counts, s_displs)], [recv, (r_counts, r_displs)]
            )
            wait_request(request, deadline, deadline.timeout is None)
            return back(out)

        return self._guard(run)

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
        return self._sync(self._alltoall, x, splits, options)

    def alltoall_async(
        self,
        x: Any,
        splits: Sequence[int] | None = None,
        options: CommunicationOptions | None = None,
    ) -> Handle:
        """Start `alltoall`."""
        return self._async(self._alltoall, x, splits, options)

    # -- barrier and objects --------------------------------------------------------------------

    def _barrier(self, options: CommunicationOptions | None) -> None:
        opts = self._opts(options)
        header, deadline = self._begin(lambda seq: Header(seq, KINDS["barrier"]), opts)

        def run() -> None:
            if self.size == 1:
                return
            if self.num_nodes == 1:
                self._shm.barrier(header if self.settings.check_collectives else None, deadline)
            elif self.settings.check_collectives:
                self._check(header, deadline)
            else:
                wait_request(self._comm.Ibarrier(), deadline, False)

        self._guard(run)

    def barrier(self, options: CommunicationOptions | None = None) -> None:
        """Wait until every rank has called `barrier`."""
        self._sync(self._barrier, options)

    def _object(self, kind: str, obj: Any, root: int, options: CommunicationOptions | None) -> Any:
        opts = self._opts(options)
        header, deadline = self._begin(lambda seq: Header(seq, KINDS[kind], extra=root + 1), opts)
        error = None
        if not 0 <= root < self.size:
            error = ValueError(f"rank {self.rank}: root must be in [0, {self.size}), got {root}")

        def run() -> Any:
            if self.size == 1 and error is None:
                return [obj] if kind == "allgather_object" else obj
            self._check(header, deadline, error)
            if kind == "allgather_object":
                return self._pkl.allgather(obj)
            return self._pkl.bcast(obj, root=root)

        return self._guard(run)

    def allgather_object(self, obj: Any, options: CommunicationOptions | None = None) -> list[Any]:
        """Return the list of every rank's picklable ``obj`` (large objects via ``pkl5``)."""
        return self._sync(self._object, "allgather_object", obj, 0, options)

    def broadcast_object(
        self, obj: Any, root: int = 0, options: CommunicationOptions | None = None
    ) -> Any:
        """Return rank ``root``'s picklable ``obj`` on every rank."""
        return self._sync(self._object, "broadcast_object", obj, root, options)

    # -- lifetime -------------------------------------------------------------------------------

    def close(self) -> None:
        """Release windows and communicators (collective). The communicator is unusable after."""
        if self in _live:
            _live.remove(self)
        self._drain()
        if self._executor is not None:
            self._executor.shutdown()
        if self._board is not None:
            self._board.free()
        self._shm.close()
        for backend in (self._nccl_hier, self._nccl):
            if backend is not None:
                backend.close()
        for comm in (self._leader_comm, self._node_comm, self._comm):
            if comm != MPI.COMM_NULL:
                comm.Free()
        self._broken = "closed"


def _same(a: Any) -> Any:
    return a


_world: Communicator | None = None
# Strong references: freeing windows is collective, so it must not depend on when each rank's
# garbage collector runs. Communicators live until `close()` or the end of the program.
_live: list[Communicator] = []


def _register(comm: Communicator) -> None:
    """Remember a communicator so that its windows are freed before MPI finalises."""
    if not _live:
        atexit.register(_close_all)
    _live.append(comm)


def _close_all() -> None:
    """Free every live communicator's windows, newest first (same order on every rank).

    Communicators that failed (a deadline passed) are skipped: their peers may never join.
    """
    global _world
    if MPI.Is_finalized():
        return
    for comm in reversed(_live):
        if comm._broken is None:
            comm.close()
    _live.clear()
    _world = None


def world() -> Communicator:
    """Return hpcdist's world communicator (created on first call; collective then).

    Like every `Communicator` on more than one rank, it installs the abort-on-exception hook
    (see `hpcdist.abort`) unless ``HPCDIST_ABORT_ON_EXCEPTION=0``.
    """
    global _world
    if _world is None:
        _world = Communicator()
    return _world
