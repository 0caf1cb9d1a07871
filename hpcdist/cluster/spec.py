"""`ClusterSpec`: which tasks make up the cluster, job by job (TF's ``tf.train.ClusterSpec``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpcdist.errors import ClusterConfigError

__all__ = ["ClusterSpec", "parse_task_index"]


def parse_task_index(value: Any) -> int:
    """A task index: an int >= 0, or the decimal digits of one as a string (``"3"``).

    TF casts with ``int()``, so ``0.5`` and ``true`` silently become tasks 0 and 1; hpcdist
    rejects them.

    Raises:
        ValueError: Anything else (a float, a bool, ``"0.5"``, a negative number); the
            message says what is expected and quotes the value.
    """
    expected = f"expected an integer >= 0 (or its digits as a string), got {value!r}"
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value.strip())
    else:
        raise ValueError(expected)
    if number < 0:
        raise ValueError(expected)
    return number


class ClusterSpec:
    """A map from job names to their tasks' addresses.

    Each job is either a list of addresses (task ``i`` at position ``i``) or a dict
    ``{task_index: address}`` for sparse jobs, as in TensorFlow.

    Args:
        cluster: A dict ``{job: [address, ...]}`` or ``{job: {index: address}}``, another
            `ClusterSpec`, or None for an empty cluster.

    Raises:
        ClusterConfigError: A job name is not a string, an index is not a non-negative integer
            (an int, or its digits as a string: ``0.5`` and ``True`` are rejected), or an
            address is not a string.
    """

    def __init__(self, cluster: Mapping[str, Any] | ClusterSpec | None = None) -> None:
        if isinstance(cluster, ClusterSpec):
            cluster = cluster.as_dict()
        if cluster is None:
            cluster = {}
        if not isinstance(cluster, Mapping):  # TF: TypeError
            raise TypeError(
                f"cluster must be a dict of job name -> tasks, got {type(cluster).__name__}"
            )
        self._jobs: dict[str, dict[int, str]] = {}
        for job, tasks in cluster.items():
            if not isinstance(job, str) or not job:
                raise ClusterConfigError(f"job names must be non-empty strings, got {job!r}")
            self._jobs[job] = self._parse_tasks(job, tasks)

    @staticmethod
    def _parse_tasks(job: str, tasks: Any) -> dict[int, str]:
        if isinstance(tasks, Mapping):
            items = list(tasks.items())
        elif isinstance(tasks, (list, tuple)):
            items = list(enumerate(tasks))
        else:  # TF: TypeError
            raise TypeError(
                f"tasks of job {job!r} must be a list of addresses or a dict "
                f"{{index: address}}, got {type(tasks).__name__}"
            )
        parsed: dict[int, str] = {}
        for index, address in items:
            try:
                i = parse_task_index(index)
            except ValueError as exc:
                raise ClusterConfigError(
                    f"task index {index!r} of job {job!r} is not an integer >= 0: {exc}"
                ) from None
            if not isinstance(address, str):
                raise ClusterConfigError(
                    f"address of task {job}:{i} must be a string, got {address!r}"
                )
            parsed[i] = address
        return dict(sorted(parsed.items()))

    def __bool__(self) -> bool:
        return bool(self._jobs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ClusterSpec):
            return self._jobs == other._jobs
        if isinstance(other, Mapping):
            try:
                return self._jobs == ClusterSpec(other)._jobs
            except ClusterConfigError:
                return False
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ClusterSpec({self.as_dict()!r})"

    @property
    def jobs(self) -> list[str]:
        """The job names, in the order they were given."""
        return list(self._jobs)

    def _job(self, job_name: str) -> dict[int, str]:
        try:
            return self._jobs[job_name]
        except KeyError:
            raise ValueError(f"no such job in cluster: {job_name!r}; jobs: {self.jobs}") from None

    def num_tasks(self, job_name: str) -> int:
        """Return the number of tasks in a job."""
        return len(self._job(job_name))

    def task_indices(self, job_name: str) -> list[int]:
        """Return the sorted task indices of a job."""
        return list(self._job(job_name))

    def task_address(self, job_name: str, task_index: int) -> str:
        """Return the address of one task.

        Raises:
            ValueError: The job or the task does not exist.
        """
        tasks = self._job(job_name)
        try:
            return tasks[int(task_index)]
        except KeyError:
            raise ValueError(
                f"no task {task_index} in job {job_name!r}; tasks: {list(tasks)}"
            ) from None

    def job_tasks(self, job_name: str) -> list[str | None]:
        """Return the addresses of a job as a dense list (None where a sparse job has a gap)."""
        tasks = self._job(job_name)
        if not tasks:
            return []
        dense: list[str | None] = [None] * (max(tasks) + 1)
        for i, address in tasks.items():
            dense[i] = address
        return dense

    def as_dict(self) -> dict[str, list[str] | dict[int, str]]:
        """Return ``{job: [addresses]}``, or ``{job: {index: address}}`` for sparse jobs.

        A job without tasks is ``{}`` (TF's form).
        """
        out: dict[str, list[str] | dict[int, str]] = {}
        for job, tasks in self._jobs.items():
            if tasks and list(tasks) == list(range(len(tasks))):
                out[job] = list(tasks.values())
            else:
                out[job] = dict(tasks)
        return out

    def num_tasks_total(self) -> int:
        """Return the number of tasks over all jobs."""
        return sum(len(t) for t in self._jobs.values())
