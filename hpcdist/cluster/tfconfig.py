"""`TFConfigClusterResolver`: the cluster from the ``TF_CONFIG`` environment variable."""

from __future__ import annotations

import json
import os
from typing import Any

from hpcdist.cluster.base import ROLES, ClusterResolver, format_master_url
from hpcdist.cluster.spec import ClusterSpec, parse_task_index
from hpcdist.errors import ClusterConfigError

__all__ = ["TFConfigClusterResolver", "load_tf_config"]


def load_tf_config() -> dict[str, Any]:
    """Parse ``TF_CONFIG``; ``{}`` when unset or empty.

    Raises:
        ClusterConfigError: Not JSON, or not a JSON object; the message quotes the value.
    """
    text = os.environ.get("TF_CONFIG", "")
    if not text.strip():
        return {}
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClusterConfigError(f"TF_CONFIG is not valid JSON ({exc}): {text!r}") from None
    if not isinstance(config, dict):
        raise ClusterConfigError(f"TF_CONFIG must be a JSON object, got: {text!r}")
    return config


class TFConfigClusterResolver(ClusterResolver):
    """Reads ``TF_CONFIG`` (``cluster``, ``task``, ``rpc_layer``, ``session_master``).

    ``TF_CONFIG`` is read again on every access, as in TensorFlow. The rank of a task is its
    position when the jobs are taken in sorted name order (chief, evaluator, ps, worker);
    tasks with the same host part of their address count as one node.

    Args:
        task_type: Overrides ``task.type``.
        task_id: Overrides ``task.index``.
        rpc_layer: Overrides ``rpc_layer``.
    """

    def __init__(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        rpc_layer: str | None = None,
    ) -> None:
        self._task_type = task_type
        self._task_id = task_id
        self._rpc_layer = rpc_layer
        self.cluster_spec()  # validate early
        self._check_task()

    def _config(self) -> dict[str, Any]:
        return load_tf_config()

    def cluster_spec(self) -> ClusterSpec:
        """Return ``TF_CONFIG["cluster"]`` as a `ClusterSpec`.

        Raises:
            ClusterConfigError: The cluster is malformed, names a job that is not a role
                (chief, worker, ps, evaluator), has more than one chief or evaluator, or gives
                two tasks the same address (TF's strategies reject the first three too).
        """
        cluster = self._config().get("cluster", {})
        try:
            spec = ClusterSpec(cluster)
        except (ClusterConfigError, TypeError) as exc:
            raise ClusterConfigError(f"TF_CONFIG cluster is invalid: {exc}") from None
        _check_cluster(spec, cluster)
        return spec

    def _check_task(self) -> None:
        task_type, task_id = self.task_type, self.task_id
        if task_type is None:
            return
        spec = self.cluster_spec()
        if task_type not in spec.jobs:
            if task_type == "evaluator":
                return
            raise ClusterConfigError(
                f"TF_CONFIG task type {task_type!r} is not a job of the cluster {spec.jobs}"
            )
        if task_id is None or task_id not in spec.task_indices(task_type):
            raise ClusterConfigError(
                f"TF_CONFIG task index {task_id!r} is not a task of job {task_type!r} "
                f"(tasks {spec.task_indices(task_type)})"
            )

    @property
    def environment(self) -> str | None:
        """``TF_CONFIG["environment"]`` (e.g. ``"cloud"``), else None (TF's property)."""
        return self._config().get("environment")

    @property
    def task_type(self) -> str | None:
        """``task.type`` (as a string), unless overridden."""
        if self._task_type is not None:
            return self._task_type
        task_type = self._config().get("task", {}).get("type")
        return None if task_type is None else str(task_type)

    @task_type.setter
    def task_type(self, value: str | None) -> None:
        self._task_type = value

    @property
    def task_id(self) -> int | None:
        """``task.index`` (an int, or its digits as a string), unless overridden.

        Raises:
            ClusterConfigError: The index is not an integer >= 0 (``0.5`` and ``true``, which
                TF's ``int()`` cast turns into tasks 0 and 1, are rejected).
        """
        if self._task_id is not None:
            index, where = self._task_id, "task_id argument"
        else:
            index, where = self._config().get("task", {}).get("index"), "TF_CONFIG task"
            if index is None:
                return None
        try:
            return parse_task_index(index)
        except ValueError as exc:
            raise ClusterConfigError(
                f"{where} index {index!r} is not an integer >= 0: {exc}"
            ) from None

    @task_id.setter
    def task_id(self, value: int | None) -> None:
        self._task_id = value

    @property
    def rpc_layer(self) -> str | None:  # type: ignore[override]
        """``rpc_layer`` from ``TF_CONFIG``, unless overridden."""
        if self._rpc_layer is not None:
            return self._rpc_layer
        return self._config().get("rpc_layer")

    @rpc_layer.setter
    def rpc_layer(self, value: str | None) -> None:
        self._rpc_layer = value

    def _ordered_tasks(self) -> list[tuple[str, int, str]]:
        spec = self.cluster_spec()
        return [
            (job, i, spec.task_address(job, i))
            for job in sorted(spec.jobs)
            for i in spec.task_indices(job)
        ]

    def _position(self) -> int:
        key = (self.task_type, self.task_id)
        for pos, (job, i, _) in enumerate(self._ordered_tasks()):
            if (job, i) == key:
                return pos
        return 0

    @property
    def rank(self) -> int:
        """Position of this task in sorted job order."""
        return self._position()

    @property
    def world_size(self) -> int:
        """Number of tasks in the cluster (at least 1)."""
        return max(1, self.cluster_spec().num_tasks_total())

    def _hosts(self) -> list[str]:
        return [address.rsplit(":", 1)[0] for _, _, address in self._ordered_tasks()]

    def _node_order(self) -> list[str]:
        return list(dict.fromkeys(self._hosts()))

    @property
    def local_rank(self) -> int:
        """Index of this task among the tasks with the same host."""
        hosts = self._hosts()
        if not hosts:
            return 0
        pos = self._position()
        return hosts[:pos].count(hosts[pos])

    @property
    def local_size(self) -> int:
        """Tasks with the same host as this one."""
        hosts = self._hosts()
        return hosts.count(hosts[self._position()]) if hosts else 1

    @property
    def node_rank(self) -> int:
        """Index of this task's host among the distinct hosts."""
        hosts = self._hosts()
        return self._node_order().index(hosts[self._position()]) if hosts else 0

    @property
    def num_nodes(self) -> int:
        """Distinct hosts in the cluster."""
        return max(1, len(self._node_order()))

    def master(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        rpc_layer: str | None = None,
    ) -> str:
        """Return the session master address, TF's rules in TF's order.

        1. ``TF_CONFIG["session_master"]``, when present, exactly as given (no rpc layer added,
           whatever the arguments).
        2. ``""`` when the cluster is empty (or ``TF_CONFIG`` unset) or is a single job with one
           task, whatever the arguments.
        3. Otherwise the address of the task (``task_type``/``task_id``, each defaulting to this
           task), prefixed by ``rpc_layer`` (default: this resolver's) as ``layer://address``.

        Raises:
            ValueError: Rule 3 with no task type or index (``TF_CONFIG`` names no task and none
                was given), or a task that is not in the cluster.
        """
        config = self._config()
        if "session_master" in config and config["session_master"] is not None:
            return str(config["session_master"])
        spec = self.cluster_spec()
        jobs = spec.jobs
        if not jobs or (len(jobs) == 1 and spec.num_tasks(jobs[0]) == 1):
            return ""
        task_type = self.task_type if task_type is None else task_type
        task_id = self.task_id if task_id is None else task_id
        rpc_layer = self.rpc_layer if rpc_layer is None else rpc_layer
        if task_type is None or task_id is None:
            raise ValueError(
                f"master() needs a task of the {spec.num_tasks_total()}-task cluster {jobs}: "
                f"expected task_type and task_id (arguments or TF_CONFIG task), got "
                f"task_type={task_type!r}, task_id={task_id!r}"
            )
        return format_master_url(spec.task_address(task_type, task_id), rpc_layer)


def _check_cluster(spec: ClusterSpec, cluster: Any) -> None:
    """Reject roles TF's strategies reject, and two tasks at one address."""
    for job in spec.jobs:
        if job not in ROLES:
            raise ClusterConfigError(
                f"TF_CONFIG cluster has unknown role {job!r}; expected roles {ROLES}: {cluster!r}"
            )
    for role in ("chief", "evaluator"):
        if role in spec.jobs and spec.num_tasks(role) > 1:
            raise ClusterConfigError(
                f"TF_CONFIG cluster must have at most one {role!r} task, got "
                f"{spec.num_tasks(role)}: {cluster!r}"
            )
    seen: dict[str, str] = {}
    for job in spec.jobs:
        for i in spec.task_indices(job):
            address, task = spec.task_address(job, i), f"{job}:{i}"
            if address in seen:
                raise ClusterConfigError(
                    f"TF_CONFIG cluster gives address {address!r} to two tasks, {seen[address]} "
                    f"and {task}; every task needs its own: {cluster!r}"
                )
            seen[address] = task
