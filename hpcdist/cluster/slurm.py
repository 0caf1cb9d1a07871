"""`SlurmClusterResolver`: topology from Slurm's environment (TF-compatible signature).

Differences from TensorFlow's resolver, on purpose: Slurm's node order is kept (TF sorts host
names), no ``scontrol`` call is made (the host list is expanded here, full syntax), zero GPUs is
a valid configuration, and GPU ids are taken from the ``CUDA_VISIBLE_DEVICES`` that Slurm set
for the node when there is one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from hpcdist.cluster.base import ClusterResolver, assign_jobs, default_jobs, format_master_url
from hpcdist.cluster.devices import parse_visible_devices
from hpcdist.cluster.hostlist import expand_hostlist, expand_tasks_per_node
from hpcdist.cluster.spec import ClusterSpec
from hpcdist.errors import ClusterConfigError

__all__ = ["SlurmClusterResolver", "slurm_var"]


def slurm_var(*names: str, required: bool = True) -> str | None:
    """Return the first of several Slurm variables that is set.

    Raises:
        RuntimeError: None is set and ``required``; the message names the variables.
    """
    for name in names:
        value = os.environ.get(name)
        if value is not None:
            return value
    if required:
        raise RuntimeError(
            f"Slurm variable {' or '.join(names)} is not set: is this process running under "
            "srun/sbatch? (outside Slurm use MPIClusterResolver or TFConfigClusterResolver)"
        )
    return None


def _parse_int(name: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ClusterConfigError(f"{name}={text!r} is not an integer") from None


def _int_var(*names: str) -> int:
    text = slurm_var(*names)  # raises, naming the variables, when none is set
    name = next(n for n in names if os.environ.get(n) is not None)
    return _parse_int(name, str(text))


def _optional_int_var(name: str) -> int | None:
    text = os.environ.get(name)
    return None if text is None or not text.strip() else _parse_int(name, text)


def _world_source() -> str:
    for name in ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"):
        if os.environ.get(name) is not None:
            return f"{name}={os.environ[name]!r}"
    return "the step's task count"


class SlurmClusterResolver(ClusterResolver):
    """Cluster resolver for processes launched by Slurm (``srun`` / ``sbatch``).

    Reads ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS`` (or ``SLURM_NTASKS``),
    ``SLURM_STEP_NODELIST`` (or ``SLURM_JOB_NODELIST``), ``SLURM_STEP_TASKS_PER_NODE`` (or
    ``SLURM_TASKS_PER_NODE``), ``SLURM_LOCALID``, ``SLURM_NODEID`` and ``CUDA_VISIBLE_DEVICES``.
    Tasks are laid out on nodes in Slurm's block order, as TF does.

    Args:
        jobs: ``{role: count}``, assigned in sorted role order; default
            `hpcdist.cluster.base.default_jobs` (the parameter-server layout when ``HPCDIST_NUM_PS``
            is set, else all workers).
        port_base: First port of the address labels on each node.
        gpus_per_node: GPUs per node; default ``SLURM_GPUS_ON_NODE``, else the number of
            entries in ``CUDA_VISIBLE_DEVICES``, else 0.
        gpus_per_task: GPUs per task; default ``gpus_per_node // max(tasks per node)``.
        tasks_per_node: An int (every node) or one count per node; default from Slurm.
        auto_set_gpu: Set ``CUDA_VISIBLE_DEVICES`` to this task's GPUs.
        rpc_layer: Prefix of `master` addresses (``"grpc"``, TF's default: ``grpc://host:port``;
            None gives the bare ``host:port``).

    Raises:
        RuntimeError: A required Slurm variable is missing (the message names it).
        ClusterConfigError: The variables contradict each other or the arguments.
    """

    def __init__(
        self,
        jobs: Mapping[str, int] | None = None,
        port_base: int = 8888,
        gpus_per_node: int | None = None,
        gpus_per_task: int | None = None,
        tasks_per_node: int | Sequence[int] | None = None,
        auto_set_gpu: bool = True,
        rpc_layer: str | None = "grpc",
    ) -> None:
        self._rank = _int_var("SLURM_PROCID")
        self._world = _int_var("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
        self._hosts = expand_hostlist(slurm_var("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"))
        self._tasks_per_node = self._resolve_tasks_per_node(tasks_per_node)
        if not 0 <= self._rank < self._world:
            raise ClusterConfigError(
                f"SLURM_PROCID={self._rank} is outside the step's {self._world} tasks"
            )
        self._jobs = dict(jobs) if jobs is not None else default_jobs(self._world)
        self._assignment = assign_jobs(self._jobs, self._world)
        self._task_type, self._task_id = self._assignment[self._rank]
        self._port_base = port_base
        self.rpc_layer = rpc_layer

        # Block layout: node and local index of every task.
        self._node_of: list[int] = []
        self._local_of: list[int] = []
        for node, count in enumerate(self._tasks_per_node):
            self._node_of.extend([node] * count)
            self._local_of.extend(range(count))
        self._node_rank, self._local_rank = self._resolve_node_and_local_id()

        self._gpus_per_node = self._resolve_gpus_per_node(gpus_per_node)
        max_tasks = max(self._tasks_per_node)
        if gpus_per_task is None:
            env_gpt = _optional_int_var("SLURM_GPUS_PER_TASK")
            gpus_per_task = env_gpt if env_gpt is not None else self._gpus_per_node // max_tasks
        if gpus_per_task < 0 or max_tasks * gpus_per_task > self._gpus_per_node:
            raise ClusterConfigError(
                f"requested {gpus_per_task} GPU(s) per task for up to {max_tasks} tasks per node, "
                f"but nodes have {self._gpus_per_node} GPU(s)"
            )
        self._gpus_per_task = gpus_per_task
        self.task_gpus = self._assign_gpus()
        if auto_set_gpu and self._gpus_per_task > 0 and self.task_gpus is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(self.task_gpus)

    def master(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        rpc_layer: str | None = None,
    ) -> str:
        """The address of a task (this one by default) as ``rpc_layer://host:port``.

        As TF's `SlurmClusterResolver.master`: a one-task step gives its address too (not
        ``""``), and ``""`` only when no task is known.
        """
        task_type = self.task_type if task_type is None else task_type
        task_id = self.task_id if task_id is None else task_id
        if task_type is None or task_id is None:
            return ""
        address = self.cluster_spec().task_address(task_type, task_id)
        return format_master_url(address, rpc_layer or self.rpc_layer)

    def get_task_info(self) -> tuple[str, int]:
        """``(task_type, task_id)`` of this task (TF's ``SlurmClusterResolver.get_task_info``)."""
        return self.task_type, self.task_id

    def _resolve_node_and_local_id(self) -> tuple[int, int]:
        """``SLURM_NODEID`` and ``SLURM_LOCALID``, else the block layout's; both in range."""
        node = _optional_int_var("SLURM_NODEID")
        if node is None:
            node = self._node_of[self._rank]
        elif not 0 <= node < len(self._tasks_per_node):
            raise ClusterConfigError(
                f"SLURM_NODEID={os.environ['SLURM_NODEID']!r} is outside the step's "
                f"{len(self._tasks_per_node)} node(s) {self._hosts}"
            )
        local = _optional_int_var("SLURM_LOCALID")
        on_node = self._tasks_per_node[node]
        if local is None:
            local = self._local_of[self._rank]
        elif not 0 <= local < on_node:
            raise ClusterConfigError(
                f"SLURM_LOCALID={os.environ['SLURM_LOCALID']!r} is outside the "
                f"{on_node} task{'s' if on_node != 1 else ''} on node {node} "
                f"({self._hosts[node]!r}); tasks per node {self._tasks_per_node}"
            )
        return node, local

    def _resolve_tasks_per_node(self, tasks_per_node: int | Sequence[int] | None) -> list[int]:
        """Tasks on each node; they must add up to the step's tasks exactly."""
        source = f"tasks_per_node={tasks_per_node!r}"
        if tasks_per_node is None:
            names = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
            text = slurm_var(*names, required=False)
            if text is not None:
                name = next(n for n in names if os.environ.get(n) is not None)
                source = f"{name}={text!r}"
            if text is None:
                if self._world % len(self._hosts):
                    raise RuntimeError(
                        "Slurm variable SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE is "
                        f"not set and {self._world} tasks do not divide evenly over "
                        f"{len(self._hosts)} nodes; pass tasks_per_node"
                    )
                counts = [self._world // len(self._hosts)] * len(self._hosts)
            else:
                counts = expand_tasks_per_node(text)
        elif isinstance(tasks_per_node, int) and not isinstance(tasks_per_node, bool):
            counts = [tasks_per_node] * len(self._hosts)
        elif isinstance(tasks_per_node, Sequence) and all(
            isinstance(c, int) and not isinstance(c, bool) for c in tasks_per_node
        ):
            counts = list(tasks_per_node)
        else:
            raise ClusterConfigError(
                f"tasks_per_node must be an int or a list of ints, got {tasks_per_node!r}"
            )
        if len(counts) != len(self._hosts):
            raise ClusterConfigError(
                f"tasks per node {counts} ({source}) name {len(counts)} nodes but the node list "
                f"has {len(self._hosts)}: {self._hosts}"
            )
        total = sum(counts)
        if total != self._world or any(c < 0 for c in counts):
            raise ClusterConfigError(
                f"{source} puts {counts} tasks on the nodes {self._hosts}, {total} "
                f"task{'s' if total != 1 else ''} in all, but {_world_source()}: the counts "
                "must be >= 0 and add up to the step's tasks"
            )
        return counts

    def _resolve_gpus_per_node(self, gpus_per_node: int | None) -> int:
        if gpus_per_node is not None:
            if gpus_per_node < 0:
                raise ClusterConfigError(f"gpus_per_node must be >= 0, got {gpus_per_node}")
            return gpus_per_node
        env = _optional_int_var("SLURM_GPUS_ON_NODE")
        if env is not None:
            return env
        visible = parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
        return len(visible) if visible else 0

    def _assign_gpus(self) -> list[str] | None:
        """GPU ids of this task; None when Slurm already bound the task to fewer GPUs."""
        if self._gpus_per_task == 0:
            return []
        visible = parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
        if not visible:
            visible = [str(i) for i in range(self._gpus_per_node)]
        if len(visible) < self._gpus_per_node:
            return None
        first = self._local_rank * self._gpus_per_task
        return visible[first : first + self._gpus_per_task]

    def cluster_spec(self) -> ClusterSpec:
        """Return the cluster: tasks on nodes in Slurm's block order, grouped by job."""
        spec: dict[str, list[str]] = {}
        for r, (role, _) in enumerate(self._assignment):
            host = self._hosts[self._node_of[r]]
            spec.setdefault(role, []).append(f"{host}:{self._port_base + self._local_of[r]}")
        return ClusterSpec(spec)

    @property
    def rank(self) -> int:
        """``SLURM_PROCID``."""
        return self._rank

    @property
    def world_size(self) -> int:
        """Number of tasks in the step."""
        return self._world

    @property
    def local_rank(self) -> int:
        """``SLURM_LOCALID``."""
        return self._local_rank

    @property
    def local_size(self) -> int:
        """Tasks on this node."""
        return self._tasks_per_node[self._node_rank]

    @property
    def node_rank(self) -> int:
        """``SLURM_NODEID``: index of this node in Slurm's node order."""
        return self._node_rank

    @property
    def num_nodes(self) -> int:
        """Nodes in the step."""
        return len(self._tasks_per_node)

    @property
    def hosts(self) -> list[str]:
        """The step's nodes, in Slurm's order."""
        return list(self._hosts)

    def num_accelerators(
        self, task_type: str | None = None, task_id: int | None = None
    ) -> dict[str, int]:
        """Return ``{"GPU": gpus_per_task}``."""
        del task_type, task_id
        return {"GPU": self._gpus_per_task}
