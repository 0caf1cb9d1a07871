"""``tf.train.replica_device_setter``: place variables on parameter servers, the rest on workers.

A TF1 training program built for between-graph replication wraps its model in::

    with tf.device(tf.train.replica_device_setter(cluster=cluster)):
        w = tf.Variable(...)  # /job:ps/task:0
        b = tf.Variable(...)  # /job:ps/task:1

`replica_device_setter` returns a device function. The graph calls it for every op (here:
every variable, through `hpcdist.compat.v1.graph.Graph.place`) with an op-like record whose
``device`` holds what the inner ``tf.device`` scopes chose so far. Ops whose type is one of
``ps_ops`` (default `STANDARD_PS_OPS`: variables, hash tables, accumulators) go to
``ps_device`` with a task picked by ``ps_strategy`` (round robin by default); every other op
goes to ``worker_device``. With ``merge_devices=True`` the op's own device fields win and only
the unset ones are filled in, so ``/cpu:0`` inside becomes ``/job:ps/task:0/device:CPU:0``
and ``/job:moon`` inside stays on ``/job:moon`` (no task is picked for a job other than the
ps job). The semantics are those of ``tensorflow/python/training/device_setter.py``.

`GreedyLoadBalancingStrategy` and `byte_size_load_fn` come from
``tensorflow/contrib/training/python/training/device_setter.py``: each ps op goes to the
least-loaded ps task, whose load then grows by ``load_fn(op)`` (the variable's size in bytes
with `byte_size_load_fn`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from hpcdist.cluster.spec import ClusterSpec
from hpcdist.compat.v1.devices import DeviceSpec
from hpcdist.logger import get_logger

__all__ = [
    "STANDARD_PS_OPS",
    "GreedyLoadBalancingStrategy",
    "byte_size_load_fn",
    "replica_device_setter",
]

#: The op types placed on parameter servers by default (TF's ``STANDARD_PS_OPS``).
STANDARD_PS_OPS: tuple[str, ...] = (
    "Variable",
    "VariableV2",
    "AutoReloadVariable",
    "MutableHashTable",
    "MutableHashTableV2",
    "MutableHashTableOfTensors",
    "MutableHashTableOfTensorsV2",
    "MutableDenseHashTable",
    "MutableDenseHashTableV2",
    "VarHandleOp",
    "BoostedTreesEnsembleResourceHandleOp",
    "BoostedTreesQuantileStreamResourceHandleOp",
    "ResourceConditionalAccumulator",
    "DecisionTreeResource",
)


class _RoundRobinStrategy:
    """Ps tasks in turn: 0, 1, ..., ``num_tasks - 1``, 0, 1, ...

    Args:
        num_tasks: Number of ps tasks.
    """

    def __init__(self, num_tasks: int) -> None:
        self._num_tasks = num_tasks
        self._next_task = 0

    def __call__(self, unused_op: Any) -> int:
        """The task for the next ps op (the op itself is not looked at).

        Args:
            unused_op: The op being placed.

        Returns:
            The ps task index.
        """
        del unused_op
        task = self._next_task
        self._next_task = (self._next_task + 1) % self._num_tasks
        return task


class GreedyLoadBalancingStrategy:
    """The least-loaded ps task (lowest index on ties); its load then grows by ``load_fn(op)``.

    This gives a near-optimal balance when ops are placed largest first; in creation order it
    is a greedy approximation. With a constant ``load_fn`` it equals round robin.

    Args:
        num_tasks: Number of ps tasks.
        load_fn: The load an op adds to its task (e.g. `byte_size_load_fn`).
    """

    def __init__(self, num_tasks: int, load_fn: Callable[[Any], float]) -> None:
        self._num_tasks = num_tasks
        self._load_fn = load_fn
        self._ps_loads = np.zeros(num_tasks)

    def __call__(self, op: Any) -> int:
        """Choose the task of ``op`` and add its load there.

        Args:
            op: The op being placed.

        Returns:
            The ps task index.
        """
        task = int(np.argmin(self._ps_loads))
        self._ps_loads[task] += self._load_fn(op)
        return task


def _defined_shape(shape: Any) -> tuple[int, ...] | None:
    """``shape`` as a tuple of ints, or None when it or one of its sizes is unknown."""
    if shape is None:
        return None
    dims = tuple(shape)
    if any(d is None for d in dims):
        return None
    return tuple(int(d) for d in dims)


def byte_size_load_fn(op: Any) -> int:
    """The size in bytes of the single output of ``op``: elements x dtype size.

    The shape is that of ``op.outputs[0]``; when it is not fully known (TF's legacy scalar
    ``Variable`` ops), the op's ``shape`` attribute is used.

    Deliberate difference from TF 2.x: there a resource variable's op is a ``VarHandleOp``
    whose output is a scalar resource handle, so this function returns 0 for every variable
    and `GreedyLoadBalancingStrategy` puts them all on ps task 0. In hpcdist the variable's
    op record carries the variable's own shape and dtype, so the load is the variable's size
    and greedy balancing works.

    Args:
        op: An op-like record (`hpcdist.compat.v1.graph.OpRecord`) with one output.

    Returns:
        The number of bytes.

    Raises:
        ValueError: ``op`` does not have exactly one output, or its shape is not fully
            defined (the message names the op).
    """
    if len(op.outputs) != 1:
        raise ValueError(f"Op {op.name} must have a single output")
    output = op.outputs[0]
    elem_size = np.dtype(output.dtype).itemsize
    shape = _defined_shape(output.shape)
    if shape is None:
        attr_shape = op.get_attr("shape")
        shape = _defined_shape(attr_shape)
        if shape is None:
            raise ValueError(
                f"Shape of op {op.name} is not fully defined: {attr_shape!r}; "
                "byte_size_load_fn needs every size known"
            )
    return int(np.prod(shape, dtype=np.int64)) * elem_size


class _ReplicaDeviceChooser:
    """The device function of `replica_device_setter` (TF's ``_ReplicaDeviceChooser``).

    Args:
        ps_tasks: Number of ps tasks.
        ps_device: Device of ps ops (a job, maybe with a device).
        worker_device: Device of every other op.
        merge_devices: Merge into the op's device instead of leaving a set device alone.
        ps_ops: Op types that go to ``ps_device``.
        ps_strategy: Picks the ps task of a ps op.
    """

    def __init__(
        self,
        ps_tasks: int,
        ps_device: str | None,
        worker_device: str | None,
        merge_devices: bool,
        ps_ops: Sequence[str],
        ps_strategy: Callable[[Any], int],
    ) -> None:
        self._ps_tasks = ps_tasks
        self._ps_device = ps_device
        self._worker_device = worker_device
        self._merge_devices = merge_devices
        self._ps_ops = ps_ops
        self._ps_strategy = ps_strategy

    def device_function(self, op: Any) -> str:
        """The device of ``op``.

        Without merging, an op that has a device keeps it. Otherwise the op's device (its set
        fields win) is merged into ``ps_device`` for ps ops, into ``worker_device`` for the
        others. A ps op gets a task from the strategy only when ``ps_device`` names a job and
        the op's own job is unset or that same job.

        Args:
            op: An op-like record: ``device`` and ``node_def.op`` (or ``type``).

        Returns:
            The device string (canonical unless returned unchanged).
        """
        if not self._merge_devices and op.device:
            return op.device

        current_device = DeviceSpec.from_string(op.device or "")
        node_def = getattr(op, "node_def", op)
        op_type = getattr(node_def, "op", None) or getattr(op, "type", None)
        if self._ps_tasks and self._ps_device and op_type in self._ps_ops:
            ps_device = DeviceSpec.from_string(self._ps_device)
            current_job, ps_job = current_device.job, ps_device.job
            if ps_job and (not current_job or current_job == ps_job):
                ps_device = ps_device.replace(task=self._ps_strategy(op))
            return ps_device.make_merged_spec(current_device).to_string()

        worker_device = DeviceSpec.from_string(self._worker_device or "")
        return worker_device.make_merged_spec(current_device).to_string()


def replica_device_setter(
    ps_tasks: int = 0,
    ps_device: str | None = "/job:ps",
    worker_device: str | None = "/job:worker",
    merge_devices: bool = True,
    cluster: ClusterSpec | Mapping[str, Any] | None = None,
    ps_ops: Sequence[str] | None = None,
    ps_strategy: Callable[[Any], int] | None = None,
) -> Callable[[Any], str] | None:
    """A device function for ``tf.device``: ps ops on parameter servers, others on workers.

    Args:
        ps_tasks: Number of ps tasks; replaced by the size of the ps job when ``cluster`` is
            given.
        ps_device: Device of ps ops; its job names the ps job of ``cluster``.
        worker_device: Device of every other op.
        merge_devices: Fill the unset fields of an op's device (True), or leave any op that
            has a device alone (False, deprecated in TF).
        cluster: A `ClusterSpec` or a dict ``{job: tasks}``.
        ps_ops: Op types placed on ps (default `STANDARD_PS_OPS`).
        ps_strategy: Callable ``op -> task`` (default round robin over the ps tasks).

    Returns:
        The device function, or None when the cluster has no ps job or there are no ps tasks.

    Raises:
        TypeError: ``ps_strategy`` is not callable.
    """
    if cluster is not None:
        if isinstance(cluster, ClusterSpec):
            cluster_spec = cluster.as_dict()
        else:
            cluster_spec = ClusterSpec(cluster).as_dict()
        ps_job_name = DeviceSpec.from_string(ps_device).job
        if ps_job_name not in cluster_spec or cluster_spec[ps_job_name] is None:
            return None
        ps_tasks = len(cluster_spec[ps_job_name])

    if ps_tasks == 0:
        return None

    if ps_ops is None:
        ps_ops = list(STANDARD_PS_OPS)

    if not merge_devices:
        get_logger().warning(
            "DEPRECATION: It is recommended to set merge_devices=true in replica_device_setter"
        )
    if ps_strategy is None:
        ps_strategy = _RoundRobinStrategy(ps_tasks)
    if not callable(ps_strategy):
        raise TypeError("ps_strategy must be callable")
    chooser = _ReplicaDeviceChooser(
        ps_tasks, ps_device, worker_device, merge_devices, ps_ops, ps_strategy
    )
    return chooser.device_function
