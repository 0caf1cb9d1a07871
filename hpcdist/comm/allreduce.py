"""The all-reduce family: plain, in place, fused (grouped), and the small-message fast path.

Every all-reduce: (1) takes a host or device buffer (`hpcdist.comm.arrays`), (2) validates
the arguments locally, any error poisoning the header check so that every rank raises,
(3) checks the header across ranks (inside the shared-memory barrier when the SHM backend
carries the data), (4) reduces with the chosen backend (`hpcdist.comm.selection`), wrapped in
compression when asked for, and (5) finishes MEAN with `mean_from_sum`.

The fast path serves small contiguous numpy arrays on one node: one shared-memory barrier,
with the Python work per call cut to the minimum, since small messages are latency-bound.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hpcdist.comm import fusion
from hpcdist.comm.arrays import (
    check_numeric,
    check_reducible,
    from_wire,
    mean_from_sum,
    to_host,
    to_wire,
)
from hpcdist.comm.checks import KINDS, Header, dtype_code, fingerprint_at, header_print
from hpcdist.comm.collective_state import CollectiveState, Resolved, same
from hpcdist.comm.deadline import Deadline
from hpcdist.comm.in_place import check_in_place, type_name
from hpcdist.comm.options import CommunicationImplementation, CommunicationOptions
from hpcdist.comm.outputs import OutputPool
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.errors import DeadlineExceededError
from hpcdist.utils.xp import array_module, is_device_array

__all__ = ["NOT_SMALL", "AllReduce"]

_ALLREDUCE = KINDS["allreduce"]
_MEAN = ReduceOp.MEAN
_SUM = ReduceOp.SUM
_OPS: dict[Any, ReduceOp] = {op: op for op in ReduceOp}
_OPS.update({op.name: op for op in ReduceOp})
_OPS.update({op.name.lower(): op for op in ReduceOp})
# dtypes the one-barrier fast path reduces directly (numeric, not bool or complex, native byte
# order: a dict lookup by dtype is the cheapest test), with their header codes
_FAST_CODES = {np.dtype(c): dtype_code(np.dtype(c)) for c in "efdbBhHiIlLqQ"}
# op or name -> (op, code, ufunc) for the fast path (enum properties cost a lookup each)
_SMALL_OPS = {key: (op, op.code, op.ufunc) for key, op in _OPS.items()}
#: Implementations under which the fast path may carry an all-reduce.
SHM_IMPLS = (CommunicationImplementation.AUTO, CommunicationImplementation.SHM)
#: Plans the fast path keeps (all are dropped when a program uses more shapes than this).
_MAX_PLANS = 256
#: The plan of an all-reduce that the fast path cannot carry.
_NO_PLAN = object()
#: `AllReduce.small_timeout` of options under which the fast path may not carry an all-reduce.
NOT_SMALL = object()


@dataclasses.dataclass(frozen=True, slots=True)
class _SmallPlan:
    """What a small all-reduce of one op, dtype and shape needs, fixed for every call."""

    mean: bool  # MEAN: reduce as SUM, then divide
    scalar: bool  # a 0-d array: the result array is made before the reduction
    ufunc: np.ufunc
    base: int  # `header_print` of the call's header
    views: tuple[list[np.ndarray], list[np.ndarray]]  # `ShmBackend.small_views`
    header: Callable[[], Header]  # the full header of the current call


def device_reduce_error(dtype: np.dtype, op: ReduceOp) -> str | None:
    """Why a GPU backend cannot reduce ``dtype`` with ``op`` (None when it can)."""
    if dtype.kind == "c" and op is ReduceOp.PROD:
        return "NCCL cannot multiply complex arrays; use implementation='mpi' (staged via host)"
    return None


class AllReduce:
    """The all-reduces of one communicator.

    Args:
        state: What the communicator's collectives share.
    """

    def __init__(self, state: CollectiveState) -> None:
        self.state = state
        self.env = state.env
        self.backends = state.backends
        self.size = state.size
        self._shm = state.backends.shm
        # One deadline for every small call, reset by ``Envelope.begin`` (no allocation per call).
        self._small_deadline = Deadline(None, state.env.stall, None, state.env.board, 0)
        #: Whether the one-barrier fast path may serve small all-reduces.
        self.fast = state.size > 1 and state.num_nodes == 1 and state.settings.shm_min_bytes == 0
        self._outputs = OutputPool()  # large out-of-place results, reused once dropped
        self._plans: dict[tuple[Any, np.dtype, tuple[int, ...]], Any] = {}
        #: `small_timeout` of each options object seen (a dict lookup per call).
        self.small_timeouts: dict[CommunicationOptions | None, Any] = {}

    # -- fast path ----------------------------------------------------------------------------

    def small_timeout(self, options: CommunicationOptions | None) -> Any:
        """The fast path's timeout under ``options``, or `NOT_SMALL` if they exclude it.

        Compression and implementations other than AUTO and SHM take the general path. The
        answer is kept in `small_timeouts`, which callers read first.
        """
        opts = self.state.opts(options)
        if opts.compression is None and opts.implementation in SHM_IMPLS:
            timeout = opts.timeout
        else:
            timeout = NOT_SMALL
        self.small_timeouts[options] = timeout
        return timeout

    def small(
        self,
        x: np.ndarray,
        op: ReduceOp | str,
        timeout: float | None,
        out: np.ndarray | None = None,
    ) -> np.ndarray | None:
        """One-barrier shared-memory all-reduce of a small contiguous array, or None if not one.

        The protocol of the general path, with the same definitions: the sequence number and
        deadline of `Envelope.begin`, the header of `_allreduce` (its fingerprint compared in
        the shared-memory barrier) and the rank-order reduction of the SHM backend; only the
        Python work per call is cut: what depends on the op, dtype and shape alone (the header's
        fingerprint without the sequence number, the slots' views) is a `_SmallPlan`, made once.
        With ``out`` (``x`` itself for ``allreduce_``) the result is written there.

        Raises:
            UnavailableError: An earlier collective failed (as `Envelope.begin`).
        """
        key = (op, x.dtype, x.shape)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan(key, x, op)
        if plan is _NO_PLAN or not x.flags.c_contiguous:
            return None
        env, shm = self.env, self._shm
        deadline = env.begin(_ALLREDUCE, timeout, self._small_deadline)
        # With the checks off no fingerprint is posted or compared, as on the general path.
        print_ = fingerprint_at(plan.base, deadline.seq) if env.checks else None
        deadline.header_fn = header = plan.header
        if out is None and plan.scalar:
            out = np.empty_like(x)
        try:
            out = shm.allreduce_small(x, plan.views, plan.ufunc, print_, header, deadline, out)
        except DeadlineExceededError as exc:
            env.fail(exc)
            raise
        if plan.mean:
            mean_from_sum(out, self.size)
        return out

    def _plan(self, key: tuple[Any, np.dtype, tuple[int, ...]], x: np.ndarray, op: Any) -> Any:
        """Make and keep the `_SmallPlan` of ``key``, or `_NO_PLAN` if the fast path cannot."""
        spec = _SMALL_OPS.get(op)
        dcode = _FAST_CODES.get(x.dtype)
        if spec is None or dcode is None or x.nbytes > self._shm.direct_bytes:
            plan = _NO_PLAN
        else:
            op, code, ufunc = spec
            shape = x.shape
            deadline = self._small_deadline  # reset by every call: its seq is the current one
            plan = _SmallPlan(
                mean=op is _MEAN,
                scalar=x.ndim == 0,
                ufunc=ufunc,
                base=header_print(_ALLREDUCE, code, dcode, shape),
                views=self._shm.small_views(x.dtype, shape),
                header=lambda: Header(deadline.seq, _ALLREDUCE, code, dcode, shape),
            )
        if len(self._plans) >= _MAX_PLANS:
            self._plans.clear()
        self._plans[key] = plan
        return plan

    # -- general path -------------------------------------------------------------------------

    def allreduce(
        self, x: Any, op: ReduceOp | str, options: CommunicationOptions | None, in_place: bool
    ) -> Any:
        """All-reduce ``x`` (a new array, or ``x`` itself with ``in_place``)."""
        opts = self.state.opts(options)
        deadline = self.env.begin(_ALLREDUCE, opts.timeout)
        return self.env.guard(deadline, lambda: self._allreduce(x, op, opts, deadline, in_place))

    def _allreduce(
        self, x: Any, op: ReduceOp | str, opts: Resolved, deadline: Deadline, in_place: bool
    ) -> Any:
        op = _OPS.get(op) or ReduceOp.parse(op)
        path, why = None, None
        if type(x) is np.ndarray:
            arr, back = x, None
            check_numeric(arr.dtype)
        else:
            path, why = self.backends.device_path(x, opts.implementation, allreduce=True)
            arr, back = (x, None) if path else to_host(x)
        on_device = path is not None
        kind = KINDS["nccl_allreduce"] if path == "nccl" else _ALLREDUCE
        header = Header(deadline.seq, kind, op.code, dtype_code(arr.dtype), arr.shape)
        error = why
        if error is None and arr.dtype.kind in "bc":
            error = check_reducible(arr.dtype, op)
        if on_device and error is None:
            error = device_reduce_error(arr.dtype, op)
        # a CuPy array staged through the host gets its result copied back to the device
        writeable = (type(x) is np.ndarray and x.flags.writeable) or is_device_array(x)
        if in_place and error is None and not writeable:
            error = (
                f"allreduce_ works in place on writeable numpy or CuPy arrays only, got "
                f"{type_name(x)}"
            )
        self.env.reject(error, why)
        return self.reduce(x, arr, back, op, opts, header, deadline, in_place, path)

    def reduce(
        self,
        x: Any,
        arr: Any,
        back: Any,
        op: ReduceOp,
        opts: Resolved,
        header: Header,
        deadline: Deadline,
        in_place: bool,
        path: str | None = None,
    ) -> Any:
        """Check, then reduce ``arr``; the shared body of every all-reduce (inside its guard).

        Args:
            x: The caller's array (returned by in-place reductions).
            arr: ``x`` as a numpy array, or the CuPy array itself when ``path`` is set.
            back: Converts a host result to the caller's array type; None for numpy.
            op: The op (MEAN is reduced as SUM, then finished).
            opts: Resolved options.
            header: This collective's header.
            deadline: Bounds every wait.
            in_place: Write the result into ``arr``.
            path: The GPU path (``"nccl"`` or ``"mpi"``), None for host buffers.
        """
        backends = self.backends
        env = self.env
        compress = opts.compression if arr.dtype.kind == "f" and op.code <= 2 else None
        fused = False
        if path is not None:
            env.check(header, deadline)
            backend = backends.for_device(path, arr, allreduce=True)
            if compress in backend.compression:
                backend = backends.compressed(backend, compress)
            else:
                compress = None
            xp = array_module(arr)
        else:
            backend = backends.for_allreduce(arr.nbytes, opts.implementation)
            if compress:
                backend = backends.compressed(backend, compress)
            fused = (
                backend is self._shm and self.state.num_nodes == 1 and self.size > 1 and env.checks
            )
            if not fused:
                env.check(header, deadline)
            xp = np
        contiguous = arr.flags.c_contiguous
        flat = arr.reshape(-1) if contiguous else xp.ascontiguousarray(arr).reshape(-1)
        wire, how = to_wire(flat, backend.dtypes)
        fresh = how == "cast" or not contiguous
        if (fresh or in_place) and backend.in_place:
            src = dst = wire
        elif xp is np:
            src, dst = wire, self._outputs.take(wire.size, wire.dtype)
        else:
            src, dst = wire, xp.empty_like(wire)
        if self.size == 1 and path is None and compress is None:
            if src is not dst:
                dst[...] = src
        else:
            backend.allreduce(
                src,
                dst,
                _SUM if op is _MEAN else op,
                env.fused(header, deadline) if fused else None,
                deadline,
            )
        if op is _MEAN:
            mean_from_sum(dst, self.size)
        result = from_wire(dst, how, arr.dtype)
        if arr.ndim != 1:
            result = result.reshape(arr.shape)
        if in_place:
            if back is not None and arr is not x:  # staged: the device array gets the result
                x[...] = back(result)
            elif fresh or dst is not src:
                arr[...] = result
            return x
        return result if back is None else back(result)

    # -- fused --------------------------------------------------------------------------------

    def grouped(
        self,
        xs: Sequence[Any],
        op: ReduceOp | str,
        options: CommunicationOptions | None,
        in_place: bool = False,
    ) -> list[Any]:
        """All-reduce ``xs`` in packs of about ``bytes_per_pack`` bytes (tensor fusion).

        With ``in_place`` the results are written into ``xs`` (which are returned): writeable
        numpy or CuPy arrays (a staged CuPy array gets its result copied back) that share no memory.
        """
        opts = self.state.opts(options)
        env = self.env
        try:
            op = _OPS.get(op) or ReduceOp.parse(op)
            # GPU arrays stay on the GPU (packed there, carried by NCCL) when all can.
            if all(type(x) is np.ndarray for x in xs):  # nothing to stage or convert back
                for dtype in {x.dtype for x in xs}:
                    check_numeric(dtype)
                path, nccl_error, hosts = None, None, [(x, same) for x in xs]
            else:
                paths = [self.backends.device_path(x, opts.implementation, True) for x in xs]
                path = paths[0][0] if all(p == paths[0][0] for p, _ in paths) else None
                nccl_error = next((e for _, e in paths if e), None)
                if path is not None:
                    hosts = [(x, same) for x in xs]
                else:
                    hosts = [to_host(x) for x in xs]
                    nccl_error = None
            arrays = [a for a, _ in hosts]
            if in_place:
                check_in_place(xs)
            whole = None
            if path is None:
                whole = functools.partial(
                    self.backends.gathers, impl=opts.implementation, compression=opts.compression
                )
            plan = fusion.plan_packs(arrays, opts.bytes_per_pack, whole)
            codes = {d: dtype_code(d) for d in {a.dtype for a in arrays}}
            layout = hash(tuple((codes[a.dtype], a.shape) for a in arrays)) & 0x3FFFFFFF
        except Exception as exc:
            # Agreed at the first pack of the other ranks: every rank raises here.
            deadline = env.begin(KINDS["grouped_allreduce"], opts.timeout)
            env.guard(deadline, functools.partial(_raise, exc))
            raise  # not reached: the guard raises ``exc``
        results: list[Any] = [None] * len(arrays)
        kind = KINDS["nccl_grouped_allreduce" if path == "nccl" else "grouped_allreduce"]
        for indices in plan:
            members = [arrays[i] for i in indices]
            deadline = env.begin(kind, opts.timeout)
            # in place straight into the members only when they are the caller's arrays
            into = in_place and all(arrays[i] is xs[i] for i in indices)
            reduced = env.guard(
                deadline,
                lambda m=members, d=deadline, into=into: self._pack(
                    m, op, opts, d, kind, layout, path, nccl_error, into
                ),
            )
            if in_place:
                if reduced is not None:  # a pack buffer: copy back into the caller's arrays
                    for i, part in zip(indices, fusion.unpack(reduced, members), strict=True):
                        xs[i][...] = hosts[i][1](part)  # staged arrays go back to the device
                continue
            for i, part in zip(indices, fusion.unpack(reduced, members), strict=True):
                results[i] = hosts[i][1](part)
        if not plan:
            deadline = env.begin(KINDS["grouped_allreduce"], opts.timeout)
            header = Header(deadline.seq, KINDS["grouped_allreduce"])
            env.guard(deadline, lambda: env.check(header, deadline))
        return list(xs) if in_place else results

    def _pack(
        self,
        members: list[Any],
        op: ReduceOp,
        opts: Resolved,
        deadline: Deadline,
        kind: int,
        layout: int,
        path: str | None,
        nccl_error: str | None,
        in_place: bool = False,
    ) -> Any:
        """Pack ``members`` and all-reduce the pack (inside the pack's guard).

        Returns:
            The reduced pack, or None when the members themselves hold the results (in place
            through the shared segment).
        """
        if path is None:  # a reused buffer: no page faults (results are views of it)
            size = sum(m.size for m in members)
            dtype = members[0].dtype
            if self.backends.gathers(
                dtype, size * dtype.itemsize, opts.implementation, opts.compression
            ):
                if in_place and all(m.flags.c_contiguous for m in members):
                    self._gather(members, None, op, deadline, kind, layout)
                    return None
                out = self._outputs.take(size, dtype)
                return self._gather(members, out, op, deadline, kind, layout)
            out = self._outputs.take(size, dtype)
            packed = fusion.pack(members, out)
        else:
            packed = fusion.pack(members)
        header = Header(deadline.seq, kind, op.code, dtype_code(packed.dtype), packed.shape, layout)
        error = nccl_error or check_reducible(packed.dtype, op)
        if path is not None and error is None:
            error = device_reduce_error(packed.dtype, op)
        self.env.reject(error, nccl_error)
        return self.reduce(packed, packed, None, op, opts, header, deadline, True, path)

    def _gather(
        self,
        members: list[np.ndarray],
        out: np.ndarray | None,
        op: ReduceOp,
        deadline: Deadline,
        kind: int,
        layout: int,
    ) -> np.ndarray | None:
        """Reduce ``members`` through the shared-memory segment into ``out`` (no pack copy).

        With ``out`` None the members receive their own results.
        """
        env = self.env
        dtype = members[0].dtype
        shape = (sum(m.size for m in members),)
        header = Header(deadline.seq, kind, op.code, dtype_code(dtype), shape, layout)
        env.reject(check_reducible(dtype, op))
        if env.checks:
            checked: Header | None = env.fused(header, deadline)
        else:
            env.check(header, deadline)
            checked = None
        self._shm.allreduce_gather(members, out, _SUM if op is _MEAN else op, checked, deadline)
        if op is _MEAN:
            for total in members if out is None else (out,):
                mean_from_sum(total, self.size)
        return out


def _raise(exc: BaseException) -> None:
    raise exc
