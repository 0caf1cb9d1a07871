"""`Strategy`: the cross-replica API shared by every strategy (``tf.distribute.Strategy``).

A strategy's topology, its `hpcdist.comm.Communicator` and the two steps of every reduction
live in its `StrategyExtended` (``strategy.extended``, `hpcdist.strategies.extended`); this
module builds TF's ``run``, ``reduce``, ``gather`` and input methods on them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from hpcdist import timeline
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.core import context
from hpcdist.data.nest import flatten, map_structure
from hpcdist.strategies.extended import StrategyExtended
from hpcdist.strategies.input import DatasetsFromFunction, DistributedDataset
from hpcdist.strategies.mirrored_run import group_replica_values, run_local_replicas
from hpcdist.strategies.replica_context import ReplicaContext, check_axis
from hpcdist.strategies.values import DistributedValues, PerReplica
from hpcdist.strategies.variables import (
    MirroredVariable,
    create_variable,
)
from hpcdist.utils.xp import as_array, device_scope, to_numpy

__all__ = ["Strategy", "StrategyExtended", "ValueContext"]

_STRATEGY_OPS = (ReduceOp.SUM, ReduceOp.MEAN, ReduceOp.MIN, ReduceOp.MAX)


class ValueContext:
    """Passed to `Strategy.experimental_distribute_values_from_function`'s function."""

    def __init__(self, replica_id_in_sync_group: int, num_replicas_in_sync: int) -> None:
        self.replica_id_in_sync_group = replica_id_in_sync_group
        self.num_replicas_in_sync = num_replicas_in_sync

    def __repr__(self) -> str:
        return (
            f"ValueContext(replica_id_in_sync_group={self.replica_id_in_sync_group}, "
            f"num_replicas_in_sync={self.num_replicas_in_sync})"
        )


class Strategy:
    """Base class of the strategies; subclasses set `extended`."""

    extended: StrategyExtended
    #: Variables are plain single-copy `Variable` objects (default and one-device strategies).
    single_copy_variables = False
    #: `experimental_local_results`, `reduce` and `gather` see this strategy's `MirroredVariable`
    #: and `SyncOnReadVariable` as their per-replica copies (TF's mirrored strategies); when
    #: False a variable is one value, like any non-distributed value (TF's central storage).
    variables_per_replica = True

    def Variable(  # noqa: N802 - TF's name
        self,
        initial_value: Any,
        name: str | None = None,
        trainable: bool | None = None,
        synchronization: Any = None,
        aggregation: Any = None,
        dtype: Any = None,
    ) -> Any:
        """Create a variable distributed by this strategy.

        Every worker starts from the chief's initial value (broadcast at creation, a
        collective: create variables in the same order on every rank).

        Args:
            initial_value: Array-like or a callable returning one.
            name: Name.
            trainable: Default True for ON_WRITE, False for ON_READ.
            synchronization: `VariableSynchronization` (AUTO means ON_WRITE; NONE is an error).
            aggregation: `VariableAggregation` (MEAN of an integer variable is an error).
            dtype: dtype of the value.

        Returns:
            `Variable` (single-copy strategies), `MirroredVariable` or `SyncOnReadVariable`.
        """
        return create_variable(
            self, initial_value, name, trainable, synchronization, aggregation, dtype
        )

    # -- scope and contexts ---------------------------------------------------------------------

    @contextlib.contextmanager
    def scope(self) -> Iterator[Strategy]:
        """Make this strategy current (cross-replica context).

        Raises:
            RuntimeError: Another strategy's scope is already open (mixing strategies).
        """
        top = context.current()
        if top is not None and top[0] is not self and context.has_strategy():
            raise RuntimeError(
                f"Mixing different strategies is not allowed: entering {type(self).__name__}'s "
                f"scope inside {type(top[0]).__name__}'s"
            )
        context.push(self, None)
        try:
            yield self
        finally:
            context.pop()

    @property
    def num_replicas_in_sync(self) -> int:
        """Replicas taking part in each step, over all workers."""
        return self.extended.num_workers * self.extended.local_replicas

    @property
    def cluster_resolver(self) -> Any:
        """The cluster resolver, or None for single-process strategies."""
        return getattr(self, "_cluster_resolver", None)

    # -- running ------------------------------------------------------------------------------

    def run(self, fn: Callable[..., Any], args: Any = (), kwargs: dict[str, Any] | None = None):
        """Run ``fn`` on each local replica; per-replica arguments are unwrapped.

        Returns:
            The replica's result with one local replica, else a `PerReplica` per leaf; a leaf
            that is the same object on every replica (a variable, a Python number) is returned
            as it is (TF's regrouping).

        Raises:
            ValueError: ``args`` is not a tuple or list (TF raises ValueError too).
        """
        if not isinstance(args, (tuple, list)):
            raise ValueError(
                f"`args` to strategy.run must be a tuple or list, got {type(args).__name__}"
            )
        kwargs = kwargs or {}
        if timeline.active():
            with timeline.span("step", "strategy.run", replicas=self.num_replicas_in_sync):
                return self._run(fn, args, kwargs)
        return self._run(fn, args, kwargs)

    def _run(self, fn: Callable[..., Any], args: Any, kwargs: dict[str, Any]) -> Any:
        per_replica = [
            (tuple(_select(x, i) for x in args), {k: _select(v, i) for k, v in kwargs.items()})
            for i in range(self.extended.local_replicas)
        ]
        if len(per_replica) == 1:
            context.push(self, ReplicaContext(self, self.extended.local_replica_ids[0]))
            try:
                with device_scope(self.extended.worker_devices[0]):
                    return fn(*per_replica[0][0], **per_replica[0][1])
            finally:
                context.pop()
        results = run_local_replicas(self, fn, per_replica)
        return map_structure(lambda *vs: group_replica_values(list(vs)), *results)

    def experimental_local_results(self, value: Any) -> tuple[Any, ...]:
        """The components of ``value`` on this worker's replicas, one per local replica.

        A `PerReplica` or `Mirrored` value gives its components; a `MirroredVariable` or
        `SyncOnReadVariable` gives one `ReplicaCopy` per local replica (TF's component
        variables; under `CentralStorageStrategy` a variable is one value, as in TF); a
        structure (tuple, dict) holding such values gives one structure per replica; any other
        value gives ``(value,)``.
        """
        parts = self.extended.local_components(value, copies=True)
        if parts is not None:
            return tuple(parts)
        leaves = flatten(value)
        if all(self.extended.local_components(leaf) is None for leaf in leaves):
            return (value,)

        def component(leaf: Any, index: int) -> Any:
            leaf_parts = self.extended.local_components(leaf, copies=True)
            return leaf if leaf_parts is None else leaf_parts[index]

        return tuple(
            map_structure(lambda v, i=i: component(v, i), value)
            for i in range(self.extended.local_replicas)
        )

    def experimental_distribute_values_from_function(self, value_fn: Callable[[ValueContext], Any]):
        """Call ``value_fn(ValueContext)`` once per local replica."""
        ids = self.extended.local_replica_ids
        values = [value_fn(ValueContext(i, self.num_replicas_in_sync)) for i in ids]
        return values[0] if len(values) == 1 else PerReplica(values)

    # -- cross-replica reductions ----------------------------------------------------------

    def _agree(self, error: Exception | None) -> None:
        """Raise ``error`` here and a matching error on every other worker (no rank hangs)."""
        comm = self.extended.communicator
        failed = error is not None
        if comm is not None:
            failed = bool(comm.allreduce(np.array([int(failed)]), ReduceOp.MAX)[0])
        if error is not None:
            raise error
        if failed:
            raise ValueError("another worker rejected the arguments of this collective call")

    def reduce(self, reduce_op: ReduceOp | str, value: Any, axis: int | None = None) -> Any:
        """Reduce a per-replica value across replicas (TF semantics).

        With ``axis=None`` the replicas' values are combined. With an axis, SUM is the sum of
        the concatenation along ``axis``, MEAN the mean of all elements along it over all
        replicas (correct for uneven batches), MIN/MAX the extreme along it.

        A non-distributed value (an array, a number; a variable of a single-copy strategy or
        of `CentralStorageStrategy`) stands for the same value on each of this worker's
        replicas, as in TF: with ``axis=None``, MEAN (MIN, MAX) returns it, and SUM returns it
        with one local replica but raises `ValueError` with several (an all-zero value gives
        zeros); across several workers it is each worker's value, reduced over the workers.
        With an axis it counts once per local replica (SUM of ``[1, 2]`` over 2 replicas: 6).
        A `MirroredVariable` reduces to its value with MEAN, MIN or MAX; SUM with
        ``axis=None`` raises `ValueError` (TF refuses both).

        Raises:
            ValueError: The op is not SUM, MEAN, MIN or MAX, or the axis is out of range
                (raised on every worker); SUM of a non-distributed value over several local
                replicas or of a `MirroredVariable`, with ``axis=None``.
        """
        op = ReduceOp.parse(reduce_op)
        if op not in _STRATEGY_OPS:
            raise ValueError(f"strategy.reduce supports SUM, MEAN, MIN and MAX, got {op.name}")
        ext = self.extended
        parts = ext.local_components(value)
        if axis is None:
            if parts is None:
                return self._reduce_plain(op, value)
            if isinstance(value, MirroredVariable):
                return self._reduce_mirrored_variable(op, value)
            # combined where the values live (GPU replicas: on the GPUs)
            local = ext.combine_local(op, PerReplica(parts))
            return to_numpy(ext.reduce_across_workers(op, [local])[0])
        # With an axis a non-distributed value counts once per local replica (TF runs the
        # per-replica sum on each replica, then reduces those).
        copies = 1 if parts is not None else ext.local_replicas
        parts = [to_numpy(v) for v in (parts if parts is not None else (value,))]
        error = None
        try:
            axes = [check_axis(axis, p.ndim) for p in parts]
        except ValueError as exc:
            error = exc
        self._agree(error)
        if op is ReduceOp.SUM:
            local = sum(p.sum(axis=a) for p, a in zip(parts, axes, strict=True)) * copies
            return ext.reduce_across_workers(op, [np.asarray(local)])[0]
        if op is ReduceOp.MEAN:
            total = sum(p.sum(axis=a, dtype=np.float64) for p, a in zip(parts, axes, strict=True))
            count = np.array(
                [sum(p.shape[a] for p, a in zip(parts, axes, strict=True))], np.float64
            )
            total, count = ext.reduce_across_workers(ReduceOp.SUM, [np.asarray(total), count])
            return (total / count[0]).astype(np.result_type(parts[0].dtype, np.float32))
        fn = np.min if op is ReduceOp.MIN else np.max
        ident = _identity(op, parts[0].dtype)
        local = [
            fn(p, axis=a) if p.shape[a] else np.full(_drop(p.shape, a), ident, p.dtype)
            for p, a in zip(parts, axes, strict=True)
        ]
        return ext.reduce_across_workers(op, [ext.combine_local(op, PerReplica(local))])[0]

    def _reduce_plain(self, op: ReduceOp, value: Any) -> np.ndarray:
        """`reduce` of a non-distributed value with ``axis=None`` (TF's rule, see `reduce`)."""
        ext = self.extended
        array = as_array(value)
        if op is ReduceOp.SUM and ext.local_replicas > 1:
            host = to_numpy(array)
            if not host.any():  # TF: an all-zero value sums to zeros
                return np.zeros(host.shape, host.dtype)
            raise ValueError(
                f"cannot SUM the non-distributed value {_short(host)} over the "
                f"{ext.local_replicas} local replicas: it stands for the same value on every "
                "replica, and TF raises ValueError for it too. Pass a per-replica value (what "
                "strategy.run returns), use MEAN, or give an axis. A Python constant passed by "
                "every replica to assign/assign_add of a SUM-aggregated variable is such a "
                "value: pass an array made in each replica instead"
            )
        comm = ext.communicator
        if comm is None:
            return to_numpy(array).copy() if type(array) is np.ndarray else to_numpy(array)
        # Several workers: each worker's value is that of its replicas (TF's rule).
        wire = ReduceOp.SUM if op is ReduceOp.MEAN else op
        out = to_numpy(comm.allreduce(array, wire))
        if op is ReduceOp.MEAN:
            n = ext.num_workers
            out = out / n if out.dtype.kind in "fc" else out // n
        return out

    def _reduce_mirrored_variable(self, op: ReduceOp, var: MirroredVariable) -> np.ndarray:
        """`reduce` of a `MirroredVariable` with ``axis=None``: its value (its copies agree)."""
        if op is ReduceOp.SUM:
            raise ValueError(
                f"cannot SUM mirrored variable {var.name!r} across replicas: its copies are "
                "identical, and TF refuses it too. Use MEAN for its value, or reduce "
                "per-replica values"
            )
        return to_numpy(var.values[0]).copy()

    def gather(self, value: Any, axis: int) -> np.ndarray:
        """Concatenate every replica's value along ``axis`` (sizes along it may differ).

        A distributed variable gives its copies; a non-distributed value is this worker's
        value once (TF's rule).
        """
        parts = self.extended.local_components(value)
        parts = [to_numpy(v) for v in (parts if parts is not None else (value,))]
        error = None
        try:
            ax = check_axis(axis, parts[0].ndim)
        except ValueError as exc:
            error = exc
        self._agree(error)
        local = np.concatenate(parts, axis=ax) if len(parts) > 1 else parts[0]
        comm = self.extended.communicator
        if comm is None:
            return local.copy()
        return np.moveaxis(comm.allgather(np.moveaxis(local, ax, 0)), 0, ax)

    # -- input ----------------------------------------------------------------------------------

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None):
        """Split each global batch of ``dataset`` across all replicas (balanced).

        See `hpcdist.strategies.input.DistributedDataset`.
        """
        return DistributedDataset(self, dataset, options)

    def distribute_datasets_from_function(
        self, dataset_fn: Callable[..., Any], options: Any = None
    ):
        """Call ``dataset_fn(InputContext)`` once on this worker; its batches are per replica.

        Uneven ends give empty batches to the replicas that ran out, until no replica on any
        worker has data (TF's partial batches; see
        `hpcdist.strategies.input.PerReplicaIterator`).
        """
        return DatasetsFromFunction(self, dataset_fn, options)


def _select(value: Any, local: int) -> Any:
    """This replica's component of ``value``, also inside tuples and dicts (TF's rule)."""
    if isinstance(value, DistributedValues):
        return value.values[local]
    if isinstance(value, (tuple, dict)):
        return map_structure(
            lambda v: v.values[local] if isinstance(v, DistributedValues) else v, value
        )
    return value


def _identity(op: ReduceOp, dtype: np.dtype) -> Any:
    if dtype.kind == "f":
        return np.inf if op is ReduceOp.MIN else -np.inf
    info = np.iinfo(dtype)
    return info.max if op is ReduceOp.MIN else info.min


def _drop(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return shape[:axis] + shape[axis + 1 :]


def _short(value: np.ndarray) -> str:
    """``value`` for an error message, cut to one short line."""
    text = " ".join(np.array2string(value, threshold=8).split())
    return text if len(text) <= 60 else text[:57] + "..."
