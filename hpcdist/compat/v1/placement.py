"""Give a graph's variables their memory: RMA windows on the ps tasks, or this process.

Every worker builds the same graph (between-graph replication), so the placement is computed
from the graph alone, without talking: variables whose device is on the ``ps`` job are laid
out, in creation order, in their ps task's segment after the session header; the others live
in this process. A hash of the ps table (names, shapes, dtypes, tasks) lets the chief and the
other workers check that they built the same graph.

A variable in this process has no value until something writes it (its initializer, a
restore, an assign): reading it before raises `FailedPreconditionError`, as TF's session does.
A local session (target ``""``, no cluster) starts with fresh, uninitialized variables, as each
``tf.Session()`` of TF has its own; the ps variables live as long as their tasks.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from hpcdist.compat.v1.devices import DeviceSpec
from hpcdist.compat.v1.task_cluster import HEADER_BYTES, PS_JOB
from hpcdist.core.variables import LocalStorage
from hpcdist.errors import ClusterConfigError, FailedPreconditionError, NotFoundError

__all__ = ["LocalVariableStorage", "Placement", "place_graph", "renew_local_variables"]

_ALIGN = 64


class LocalVariableStorage(LocalStorage):
    """The memory of a variable in this process: unreadable until first written.

    Args:
        value: An array of the variable's shape and dtype (its contents are not a value).
        name: The variable's name (for the error).
    """

    def __init__(self, value: np.ndarray, name: str) -> None:
        super().__init__(value)
        self.name = name
        self.initialized = False

    def _check(self) -> None:
        if not self.initialized:
            raise FailedPreconditionError(
                f"Attempting to use uninitialized value {self.name}: run its initializer "
                "first (tf.global_variables_initializer(), variable.initializer, a "
                "Saver.restore, or a MonitoredTrainingSession, which initializes them)"
            )

    def read(self) -> np.ndarray:
        """The array (raises before the first write)."""
        self._check()
        return super().read()

    def local_array(self) -> np.ndarray:
        """The array for in-place updates (raises before the first write)."""
        self._check()
        return super().local_array()

    def add(self, delta: np.ndarray) -> None:
        """In-place add.

        Raises:
            NotFoundError: Before the first write (TF's error for an update of a resource
                variable that was never initialized).
        """
        if not self.initialized:
            raise NotFoundError(
                f"Resource {self.name} does not exist: the variable {self.name} was updated "
                "before it was initialized (run its initializer first)"
            )
        super().add(delta)

    def write(self, value: np.ndarray) -> None:
        """Copy ``value`` in: the variable is initialized from now on."""
        super().write(value)
        self.initialized = True


class Placement:
    """Where each variable of a graph lives.

    Attributes:
        table: ``(name, shape, dtype, ps task)`` of every ps variable, in creation order.
        digest: A signed 63-bit hash of ``table``.
        remote: Whether any variable lives on a ps.
    """

    def __init__(self, table: list[tuple[str, tuple, str, int]]) -> None:
        self.table = table
        blob = repr(table).encode()
        self.digest = int.from_bytes(hashlib.sha256(blob).digest()[:8], "little") >> 1
        self.remote = bool(table)


def ps_task(var: Any, num_ps: int) -> int | None:
    """The ps task of ``var``'s device, or None when it is not on the ps job.

    Raises:
        ClusterConfigError: The device names a ps task the cluster does not have.
    """
    spec = DeviceSpec.from_string(var.device)
    if spec.job != PS_JOB or num_ps == 0:
        return None
    task = spec.task or 0
    if task >= num_ps:
        raise ClusterConfigError(
            f"variable {var.name!r} is placed on {var.device!r}, but the cluster has {num_ps} "
            f"{PS_JOB} task(s)"
        )
    return task


def place_graph(graph: Any, cluster: Any) -> Placement:
    """Place every variable of ``graph`` (once per graph; later calls return the first result).

    Args:
        graph: The graph.
        cluster: The process's `TaskCluster`, or None (every variable in this process).

    Raises:
        ClusterConfigError: The ps variables do not fit in the segments (names the setting).
    """
    if graph.binding is not None:
        return graph.binding
    num_ps = len(cluster.ps_ranks) if cluster is not None else 0
    used = [HEADER_BYTES] + [0] * max(num_ps - 1, 0)
    table: list[tuple[str, tuple, str, int]] = []
    for var in graph.variables:
        task = ps_task(var, num_ps)
        if task is None:
            var.place(LocalVariableStorage(var.initial_value, var.name))
            continue
        nbytes = int(np.prod(var.shape, dtype=np.int64)) * var.dtype.itemsize
        offset = used[task]
        used[task] = offset + -(-max(nbytes, 1) // _ALIGN) * _ALIGN
        if used[task] > cluster.segment_bytes:
            total = sum(
                int(np.prod(v.shape)) * v.dtype.itemsize
                for v in graph.variables
                if ps_task(v, num_ps) == task
            )
            raise ClusterConfigError(
                f"the variables placed on /job:{PS_JOB}/task:{task} need at least {total} bytes, "
                f"more than its {cluster.segment_bytes}-byte RMA segment: set "
                f"HPCDIST_PS_SEGMENT_BYTES to at least {2 * total + HEADER_BYTES}"
            )
        var.place(cluster.storage(task, offset, var.shape, var.dtype, var.name))
        table.append((var.name, tuple(var.shape), var.dtype.str, task))
    graph.binding = Placement(table)
    return graph.binding


def renew_local_variables(graph: Any, cluster: Any) -> None:
    """Give every variable of ``graph`` that lives in this process fresh, uninitialized memory.

    A local session calls it (each ``tf.Session()`` of TF has its own variables).
    """
    num_ps = len(cluster.ps_ranks) if cluster is not None else 0
    for var in graph.variables:
        if ps_task(var, num_ps) is None:
            var.place(LocalVariableStorage(var.initial_value, var.name))
